"""Listing a project never disturbs the processes writing in it.

Another process opens and lists the project over and over (as
``rl-studio-engine models --project P`` does) while a real PPO training run
checkpoints into it and a GGUF export writes into it; both complete, and user
files whose names merely contain ``.tmp-`` survive.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from tiny_models import build_tiny_model

from engine.store.atomic import STALE_TEMP_AGE_S
from engine.store.project import Project

ROOT = Path(__file__).resolve().parents[1]
LISTINGS = 100
STEPS = "1024"

# Lists while writers run: ``begin NAME`` / ``end NAME`` lines on stdin say
# when; it counts the listings made during each and prints NAME once that
# reaches 100. Back to back while a running writer has had fewer; then it
# waits up to 10 ms for a line between listings, which paces it. At the end
# of stdin it prints the counts as JSON.
LISTER = r"""
import json, select, sys
from engine.store.project import Project

root = sys.argv[1]
during, running = {}, set()
while True:
    if running:
        project = Project.open(root)
        project.list_models()
        project.list_runs()
        project.close()
        for w in running:
            during[w] += 1
            if during[w] == 100:
                print(w, flush=True)
    pace = 0.01 if all(during[w] >= 100 for w in running) else 0
    if select.select([sys.stdin], [], [], pace if running else None)[0]:
        line = sys.stdin.readline()
        if not line:
            break
        verb, name = line.split()
        if verb == "begin":
            running.add(name)
            during.setdefault(name, 0)
        else:
            running.discard(name)
print(json.dumps(during))
"""

# A GGUF export that, once its temporary file holds the first tensor, says
# so (the temporary names in its folder) and waits for a line on stdin: the
# listings then fall inside the write, however fast the machine.
EXPORTER = r"""
import json, sys
from pathlib import Path
from engine.export.gguf import export_gguf

out = Path(sys.argv[2])
paused = []

def progress(done, total, message):
    if done and not paused:
        paused.append(1)
        names = [p.name for p in out.parent.iterdir() if ".tmp-" in p.name]
        print(json.dumps(names), flush=True)
        sys.stdin.readline()

report = export_gguf(sys.argv[1], out, "f32", progress)
print(json.dumps({"verified": report.verified}), flush=True)
"""


def popen(*args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *map(str, args)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_listing_during_training_and_export_disturbs_neither(tmp_path: Path) -> None:
    root = tmp_path / "project"
    Project.open(root, create=True).close()
    old = os.stat(root).st_mtime - STALE_TEMP_AGE_S - 60
    user_files = [root / "x.tmp-y", root / "data" / "results.tmp-final.csv"]
    for f in user_files:
        f.write_text("mine")
        os.utime(f, (old, old))
    model = build_tiny_model(tmp_path / "tiny", "qwen2")
    gguf_out = root / "models" / "exports" / "tiny-f32.gguf"
    lister = popen("-c", LISTER, root)
    assert lister.stdin is not None and lister.stdout is not None
    lock = threading.Lock()

    def tell(line: str) -> None:
        with lock:
            lister.stdin.write(line + "\n")
            lister.stdin.flush()

    train = popen(
        *("-m", "engine", "train", "--env", "CartPole-v1", "--algo", "PPO"),
        *("--steps", STEPS, "--seed", "1", "--quiet", "--project", root),
        *("--set", "checkpoint_every_steps=64", "--set", "eval_every_steps=0"),
    )
    tell("begin train")
    outputs: dict[str, tuple[str, str]] = {}

    def finish_training() -> None:
        outputs["train"] = train.communicate(timeout=300)
        tell("end train")

    thread = threading.Thread(target=finish_training)
    thread.start()
    export = popen("-c", EXPORTER, model, gguf_out)
    assert export.stdout is not None and export.stdin is not None
    writing = json.loads(export.stdout.readline() or "null")
    assert writing and all(name.startswith(".tiny-f32.gguf.tmp-") for name in writing)
    tell("begin export")
    while lister.stdout.readline().strip() != "export":
        pass  # "train" may reach its count first
    export.stdin.write("\n")
    export.stdin.flush()
    outputs["export"] = export.communicate(timeout=120)
    tell("end export")
    thread.join()
    out, err = lister.communicate(timeout=120)
    assert lister.returncode == 0, err[-2000:]
    during = json.loads(out.strip().splitlines()[-1])

    for name, proc in (("train", train), ("export", export)):
        assert proc.returncode == 0, f"{name}: {outputs[name][1][-3000:]}"
        assert during[name] >= LISTINGS, (name, during)
    assert json.loads(outputs["export"][0]) == {"verified": True}
    assert gguf_out.is_file()
    summary = json.loads(outputs["train"][0])
    assert summary["total_steps"] >= int(STEPS)
    project = Project.open(root)
    try:
        (run,) = project.list_runs()
        assert run.status == "completed", run.reason
        checkpoints = Path(run.run_dir) / "checkpoints"
        assert any((p / "state.json").is_file() for p in checkpoints.iterdir())
    finally:
        project.close()
    assert [f.read_text() for f in user_files] == ["mine", "mine"]
    leftovers = [
        p for p in root.rglob("*") if p.name.startswith(".") and ".tmp-" in p.name
    ]
    assert leftovers == []
    print(
        f"listings during training {during['train']}, during export {during['export']}"
    )
