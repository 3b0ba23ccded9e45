"""``llm.merge`` writes its folder whole or not at all: a full disk mid-save
is one sentence, leaves no half-written model, and keeps an earlier merge."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from tiny_models import build_tiny_model

from engine.errors import EngineError
from engine.llm.merge import merge_adapter

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def _adapter(root: Path) -> tuple[Path, Path]:
    transformers.logging.set_verbosity_error()
    base = build_tiny_model(root / "base", "qwen2")
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    cfg = peft.LoraConfig(
        r=4, target_modules=["q_proj"], lora_dropout=0.0, init_lora_weights=False
    )
    torch.manual_seed(0)
    adapter = root / "adapter"
    peft.get_peft_model(model, cfg).save_pretrained(adapter)
    return base, adapter


def test_merge_is_whole_or_nothing(tmp_path: Path, monkeypatch) -> None:
    base, adapter = _adapter(tmp_path)
    models = tmp_path / "project" / "models"
    out = merge_adapter(str(adapter), str(base), models / "merged")
    assert out == models / "merged"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in out.iterdir()
    }
    first = (out / "model.safetensors").read_bytes()

    real = transformers.PreTrainedModel.save_pretrained

    def fills_the_disk(self, save_directory, *args, **kwargs):
        real(self, save_directory, *args, **kwargs)  # the weights are written...
        # ...and then the OS refuses the next write, as a full disk does.
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", fills_the_disk)
    with pytest.raises(EngineError) as exc:
        merge_adapter(str(adapter), str(base), models / "merged")
    msg = str(exc.value)
    assert msg.startswith(f"The disk holding {models} is full; free about ")
    assert msg.endswith(" MB and merge again.") and "\n" not in msg
    # The earlier merge is untouched and no temporary folder stays.
    assert [p.name for p in models.iterdir()] == ["merged"]
    assert (out / "model.safetensors").read_bytes() == first
    with pytest.raises(EngineError):
        merge_adapter(str(adapter), str(base), models / "second")
    assert [p.name for p in models.iterdir()] == ["merged"]
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen2"
