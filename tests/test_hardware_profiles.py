"""Hardware profiles of ``rl.train``: expansion in validation (a setting the
run gives wins, then the profile, then the preset), the built-in ``gpu``
profile refused without a GPU, saved profiles (round trip, a malformed file
or entry, names), ``rl-studio-engine hardware --profiles / --save-profile``,
the JAX devices of the hardware report, and the New run dialog showing what
each profile sets, on the real engine with a fake ``nvidia-smi``.

GPUs are faked at the detection boundary only: NVML and ``nvidia-smi`` in
:mod:`engine.hardware` (a fake executable on the engine's PATH for the
dialog).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QComboBox, QLineEdit

from engine import hardware
from engine.errors import ConfigError
from engine.hardware import GpuInfo
from engine.rl import hardware_profiles
from engine.rl.config import check, check_profile_settings, validate
from engine.rl.hardware_profiles import load_saved, profiles_file, save_profile
from engine.rl.schema import profile_previews

REPO = Path(__file__).resolve().parents[1]
H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", "cuda", 81559 * 2**20, True, "9.0")


@pytest.fixture(autouse=True)
def no_saved_profiles() -> Iterator[None]:
    """Each test starts without a profiles file (the test home's config)."""
    profiles_file().unlink(missing_ok=True)
    yield
    profiles_file().unlink(missing_ok=True)


def fake_gpus(monkeypatch: pytest.MonkeyPatch, gpus: list[GpuInfo]) -> None:
    """NVML answers ``gpus`` (nvidia-smi is not asked); detection re-runs."""
    monkeypatch.setattr(hardware, "_nvml_gpus", lambda: list(gpus))
    monkeypatch.setattr(hardware, "_smi_gpus", lambda executable: [])
    monkeypatch.setattr(hardware, "_torch_probe_needed", lambda: False)
    monkeypatch.setattr(hardware, "_gpu_cache", {})


# ------------------------------------------------------------- expansion
def test_auto_is_as_without_a_profile_and_cpu_sets_its_settings() -> None:
    plain = validate({"env": "CartPole-v1", "seed": 1})
    auto = validate({"env": "CartPole-v1", "seed": 1, "hardware_profile": "auto"})
    assert auto == plain and plain["hardware_profile"] == "auto"
    assert not any("hardware profile" in n for n in plain["notes"])

    cpu = validate({"env": "CartPole-v1", "seed": 1, "hardware_profile": "cpu"})
    assert cpu["device"] == "cpu" and cpu["backend"] in ("sb3", "jax")
    assert cpu["torch_threads"] == plain["torch_threads"]  # from the cores
    assert "hardware profile 'cpu' set device cpu, backend auto" in cpu["notes"]
    # Validated once, the settings are the run's own: no second note.
    assert validate(cpu) == cpu


def test_the_run_s_own_setting_wins_then_the_profile_then_the_preset() -> None:
    save_profile("wide", {"n_envs": 2, "device": "cpu"}, check_profile_settings)
    cfg = validate({"env": "CartPole-v1", "seed": 1, "hardware_profile": "wide"})
    assert cfg["n_envs"] == 2  # the CartPole PPO preset says 8
    assert cfg["device"] == "cpu"
    assert "hardware profile 'wide' set n_envs 2, device cpu" in cfg["notes"]

    own = validate(
        {"env": "CartPole-v1", "seed": 1, "hardware_profile": "wide", "n_envs": 4}
    )
    assert own["n_envs"] == 4 and own["device"] == "cpu"
    assert (
        "hardware profile 'wide' set device cpu (the run's own n_envs kept)"
        in own["notes"]
    )


def test_an_unknown_profile_is_one_sentence_naming_the_known_ones() -> None:
    save_profile("mine", {"n_envs": 2}, check_profile_settings)
    with pytest.raises(ConfigError) as err:
        validate({"env": "CartPole-v1", "hardware_profile": "fast"})
    assert err.value.field == "hardware_profile"
    assert str(err.value) == (
        "Unknown hardware profile 'fast'; choose one of auto, cpu, gpu, mine."
    )


def test_the_gpu_profile_is_refused_without_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_gpus(monkeypatch, [])
    with pytest.raises(ConfigError) as err:
        validate({"env": "CartPole-v1", "hardware_profile": "gpu"})
    assert err.value.field == "hardware_profile"
    assert str(err.value) == (
        "The gpu hardware profile needs a GPU, and none was detected on this "
        "machine; choose auto or cpu."
    )
    gpu = profile_previews("PPO", {})["gpu"]
    assert gpu["problem"] == str(err.value)


def test_the_gpu_profile_uses_the_detected_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(monkeypatch, [H100])
    assert hardware_profiles.find("gpu").settings == {
        "device": "cuda",
        "backend": "auto",
    }
    previews = profile_previews("PPO", {"n_envs": 8})
    gpu = {r["name"]: (r["value"], r["source"]) for r in previews["gpu"]["settings"]}
    assert previews["gpu"]["problem"] == ""
    assert "NVIDIA H100" in previews["gpu"]["description"]
    assert gpu["device"] == ("cuda", "profile")
    assert gpu["n_envs"] == (8, "preset")
    # What engine.hardware derives for language models on an 80 GB GPU ...
    assert gpu["llm_precision"] == ("bf16", "hardware")
    assert gpu["llm_batch_size"] == (16, "hardware")
    # ... and on the CPU alone, which the cpu profile keeps to.
    cpu = {r["name"]: r["value"] for r in previews["cpu"]["settings"]}
    assert cpu["device"] == "cpu" and cpu["llm_batch_size"] == 1
    auto = {r["name"]: r["value"] for r in previews["auto"]["settings"]}
    assert auto["device"].startswith("auto (cuda")
    # Validation goes on to check the device with torch, which has no CUDA
    # here: the run is refused on its device, never half-started.
    if not _torch_cuda():
        with pytest.raises(ConfigError) as err:
            validate({"env": "CartPole-v1", "hardware_profile": "gpu"})
        assert err.value.field == "device"


def _torch_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def test_jax_devices_follow_the_cuda_plugin_and_the_gpus() -> None:
    assert hardware.jax_devices([], [H100]) == []
    assert hardware.jax_devices(["cpu"], [H100]) == ["cpu:0"]
    assert hardware.jax_devices(["cpu", "cuda"], []) == ["cpu:0"]
    assert hardware.jax_devices(["cpu", "cuda"], [H100, H100]) == ["cuda:0", "cuda:1"]


# -------------------------------------------------------- saved profiles
def test_saved_profiles_round_trip_and_keep_each_other() -> None:
    path = save_profile("box", {"n_envs": 16, "device": "CPU"}, check_profile_settings)
    save_profile("lean", {"torch_threads": 2}, check_profile_settings)
    save_profile("box", {"backend": "sb3"}, check_profile_settings)  # replaced
    assert path == profiles_file()
    saved = load_saved()
    assert saved.problems == () and saved.readable
    assert {n: p.settings for n, p in saved.profiles.items()} == {
        "box": {"backend": "sb3"},
        "lean": {"torch_threads": 2},
    }
    assert json.loads(path.read_text())["format"] == 1


def test_a_malformed_file_is_one_sentence_and_is_not_overwritten() -> None:
    path = profiles_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"profiles": {"box": {"n_envs": 16}')  # cut short
    saved = load_saved()
    assert not saved.readable and saved.profiles == {}
    (problem,) = saved.problems
    assert problem.startswith(f"The hardware profiles file {path} is not valid JSON")
    # The built-ins still work.
    assert set(hardware_profiles.all_profiles(saved)) == {"auto", "cpu", "gpu"}
    with pytest.raises(ConfigError) as err:
        save_profile("lean", {"torch_threads": 2}, check_profile_settings)
    assert "fix or remove it before saving a profile" in str(err.value)
    assert path.read_text() == '{"profiles": {"box": {"n_envs": 16}'


def test_a_malformed_entry_loses_no_other_profile() -> None:
    path = profiles_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = {
        "good": {"n_envs": 4},
        "odd": {"learning_rate": 1},
        "cpu": {"n_envs": 2},
        "bad name!": {"n_envs": 2},
        "flag": {"n_envs": True},
    }
    path.write_text(json.dumps({"format": 1, "profiles": entries}))
    saved = load_saved()
    assert list(saved.profiles) == ["good"]
    assert saved.problems == (
        "The saved hardware profile 'odd' sets 'learning_rate', which a profile "
        "cannot set (only device, torch_threads, n_envs, backend).",
        "'cpu' is a built-in hardware profile; save yours under another name.",
        "A hardware profile's name must be a letter followed by up to 39 letters, "
        "digits, '_', '.' or '-', not 'bad name!'.",
        "The saved hardware profile 'flag' sets n_envs to True, which is neither "
        "text nor a whole number.",
    )
    save_profile("more", {"n_envs": 3}, check_profile_settings)
    kept = json.loads(path.read_text())["profiles"]
    assert kept == {**entries, "more": {"n_envs": 3}}  # the bad ones kept as read


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        ("auto", {"n_envs": 2}, "'auto' is a built-in hardware profile"),
        ("", {"n_envs": 2}, "A hardware profile's name must be a letter"),
        ("a/b", {"n_envs": 2}, "A hardware profile's name must be a letter"),
        ("x" * 41, {"n_envs": 2}, "A hardware profile's name must be a letter"),
        ("empty", {}, "needs at least one setting"),
        ("big", {"n_envs": 0}, "The hardware profile 'big': n_envs must be at least 1"),
        ("tpu", {"device": "tpu"}, "device must be auto, cpu, cuda, cuda:N or mps"),
        ("b", {"backend": "numpy"}, "The hardware profile 'b': backend must be one"),
    ],
)
def test_a_profile_that_cannot_be_is_not_saved(
    name: str, settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        save_profile(name, settings, check_profile_settings)
    assert err.value.field == "hardware_profile"
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert not profiles_file().exists()


def test_a_saved_profile_with_a_bad_value_is_refused_by_the_run() -> None:
    path = profiles_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"profiles": {"hand": {"n_envs": 0}}}))
    problem = profile_previews("PPO", {})["hand"]["problem"]
    assert problem == "The hardware profile 'hand': n_envs must be at least 1, not 0."
    with pytest.raises(ConfigError) as err:
        validate({"env": "CartPole-v1", "hardware_profile": "hand"})
    assert (err.value.field, str(err.value)) == ("hardware_profile", problem)


# -------------------------------------------------------------------- CLI
def engine_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", "hardware", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_saves_and_lists_profiles_and_reports_jax_and_cpu_features() -> None:
    done = engine_cli(
        "--save-profile", "box", "--set", "n_envs=12", "--set", "device=cpu"
    )
    assert done.returncode == 0, done.stderr
    assert str(profiles_file()) in done.stdout

    listed = engine_cli("--profiles", "--compact")
    assert listed.returncode == 0, listed.stderr
    out = json.loads(listed.stdout)
    assert [p["name"] for p in out["profiles"]] == ["auto", "cpu", "gpu", "box"]
    box = {r["name"]: (r["value"], r["source"]) for r in out["profiles"][3]["settings"]}
    assert box["n_envs"] == (12, "profile") and box["device"] == ("cpu", "profile")
    assert box["backend"] == ("auto", "default")
    assert out["problems"] == [] and out["file"] == str(profiles_file())

    report = json.loads(engine_cli("--compact").stdout)
    assert "jax_devices" in report and "cpu_features" in report
    if report["jax_version"]:
        assert report["jax_devices"][0].partition(":")[0] in ("cpu", "cuda")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--save-profile", "x", "--set", "learning_rate=1"),
            "A hardware profile cannot set 'learning_rate'; it sets device, "
            "torch_threads, n_envs, backend.",
        ),
        (("--set", "n_envs=2"), "--set goes with --save-profile NAME."),
        (
            ("--save-profile", "gpu", "--set", "n_envs=2"),
            "'gpu' is a built-in hardware profile; save yours under another name.",
        ),
    ],
)
def test_cli_refuses_in_one_sentence(args: tuple[str, ...], message: str) -> None:
    done = engine_cli(*args)
    assert done.returncode == 2
    assert done.stderr.strip() == f"rl-studio-engine hardware: {message}"


# ----------------------------------------------------------------- dialog
def fake_nvidia_smi(folder: Path) -> Path:
    """An ``nvidia-smi`` that answers the detection query with one H100."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia-smi"
    query = f"--query-gpu={hardware.NVIDIA_SMI_DETECT_QUERY}"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"if {query!r} not in sys.argv:\n"
        "    sys.exit('unexpected arguments: ' + ' '.join(sys.argv[1:]))\n"
        "print('0, NVIDIA H100 80GB HBM3, 81559, 9.0')\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def session(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A studio session on a real engine that finds one (fake) H100."""
    from studio.engine_client import EngineClient
    from studio.session import Session
    from studio.settings import Settings
    from studio.state.project_state import ProjectState

    fake = fake_nvidia_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    session = Session(EngineClient(), ProjectState(), settings)
    session.client.start()
    yield session
    session.client.stop()


def test_new_run_dialog_shows_what_each_profile_sets(qtbot, session) -> None:  # type: ignore[no-untyped-def]
    from studio.training.run_dialog import RunDialog

    save_profile("box", {"n_envs": 12, "backend": "sb3"}, check_profile_settings)
    dialog = RunDialog(session, initial={"env": "CartPole-v1", "algo": "PPO"})
    qtbot.addWidget(dialog)
    with qtbot.waitSignal(dialog.profile_preview_changed, timeout=60_000) as shown:
        pass
    assert shown.args == ["auto"]
    preview = dialog.profile_preview
    assert preview.isVisibleTo(dialog)
    rows = preview.rows()
    assert rows["device"] == (
        "auto (cuda for image policies, cpu for MLP)",
        "the hardware",
    )
    assert rows["n_envs"] == ("8", "the preset")
    assert rows["llm_batch_size"] == ("16", "the hardware")

    combo = dialog.form.editor("hardware_profile")
    assert isinstance(combo, QComboBox)
    assert [combo.itemText(i) for i in range(combo.count())] == [
        "auto",
        "cpu",
        "gpu",
        "box",
    ]
    expected = {
        "cpu": {
            "device": ("cpu", "the profile"),
            "llm_batch_size": ("1", "the hardware"),
        },
        "gpu": {"device": ("cuda", "the profile"), "backend": ("auto", "the profile")},
        "box": {"n_envs": ("12", "the profile"), "backend": ("sb3", "the profile")},
    }
    for name, want in expected.items():
        with qtbot.waitSignal(dialog.profile_preview_changed, timeout=5_000) as shown:
            combo.setCurrentText(name)
        assert shown.args == [name]
        rows = preview.rows()
        assert {k: rows[k] for k in want} == want, rows
        if name == "gpu":
            assert "the machine's GPU (NVIDIA H100" in preview.summary.text()
    assert dialog.config()["hardware_profile"] == "box"

    # A setting typed in the form wins over the profile, and the table says so.
    editor = dialog.form.editor("n_envs")
    line = editor if isinstance(editor, QLineEdit) else editor.property("line_edit")
    assert isinstance(line, QLineEdit)
    line.selectAll()
    with qtbot.waitSignal(dialog.profile_preview_changed, timeout=5_000):
        qtbot.keyClicks(line, "3")
    qtbot.waitUntil(
        lambda: preview.rows()["n_envs"] == ("3", "this form"), timeout=5_000
    )


def test_a_reproduce_command_spells_the_profile_out(tmp_path: Path) -> None:
    """A run's reproduce command rebuilds its config where the profile it
    named was never saved: the profile's values are in the command."""
    import argparse

    from engine.rl.cli import build_config, configure
    from engine.rl.train import reproduce_argv

    save_profile("box", {"n_envs": 3, "device": "cpu"}, check_profile_settings)
    cfg = validate(
        {
            "env": "CartPole-v1",
            "seed": 2,
            "hardware_profile": "box",
            "project_dir": str(tmp_path),
        }
    )
    argv = reproduce_argv(check(cfg))
    assert "hardware_profile=box" not in argv
    profiles_file().unlink()
    parser = argparse.ArgumentParser()
    configure(parser)
    again = validate(build_config(parser.parse_args(argv[2:]), tmp_path))
    assert again["hardware_profile"] == "auto"
    assert {**again, "hardware_profile": "box", "notes": cfg["notes"]} == cfg
