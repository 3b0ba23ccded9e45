"""The job-kind contract (engine/jobs/registry.py): every kind is declared
once, beside its job, with a typed config; the supervisor can import every
declaring module without the heavy libraries; the studio lists runs by what
the engine declared."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.jobs.registry import (
    GROUPS,
    config_class,
    get_kind,
    kinds,
    validate_config,
)
from engine.settings import as_dict, first_paragraph
from studio.state.job_kinds import JobKindCatalog

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "trl", "stable_baselines3", "peft")


def test_every_kind_declares_a_config_dataclass_and_a_group() -> None:
    for name, kind in kinds().items():
        assert dataclasses.is_dataclass(kind.config), f"{name} has no config class"
        assert kind.config.__dataclass_params__.frozen, f"{name}'s config is mutable"  # type: ignore[attr-defined]
        assert kind.group in GROUPS and kind.label and kind.description, name


def test_the_config_class_and_description_are_read_from_the_job_function() -> None:
    """The decorator names neither: the cfg annotation and the docstring's
    first paragraph are the one place each is said, and the paragraph users
    read carries no reStructuredText."""
    for name, kind in kinds().items():
        assert config_class(kind.run) is kind.config, name
        assert kind.description == first_paragraph(kind.run.__doc__), name
        assert "``" not in kind.description and ":func:" not in kind.description, name
    assert get_kind("llm.merge").description == (
        "Merges a LoRA adapter into its base model as a new HF folder."
    )


def test_a_job_function_without_a_config_annotation_is_refused() -> None:
    def untyped(ctx, cfg):  # type: ignore[no-untyped-def]
        return {}

    def elsewhere(ctx: object, cfg: NotDeclaredHere) -> dict[str, object]:  # type: ignore[name-defined]  # noqa: F821
        return {}

    for run in (untyped, elsewhere):
        with pytest.raises(AssertionError, match="run\\(ctx, cfg: ConfigClass\\)"):
            config_class(run)


def test_a_docstring_s_first_paragraph_is_one_line() -> None:
    assert first_paragraph("Does a thing\n    across lines.\n\n    Details.") == (
        "Does a thing across lines."
    )
    assert first_paragraph(None) == ""


def test_a_recorded_config_loads_back_as_the_same_instance() -> None:
    """What a run records (config.json) is what its job gets, typed."""
    for name, kind in kinds().items():
        cfg = kind.config()
        recorded = json.loads(json.dumps(kind.record(cfg)))
        assert kind.load(recorded) == cfg, name


def test_validation_returns_the_instance_the_job_reads() -> None:
    kind = get_kind("selftest")
    cfg = kind.validate({"steps": 5, "step_seconds": 0})
    assert isinstance(cfg, kind.config) and cfg.steps == 5
    assert isinstance(cfg.seed, int)  # drawn and recorded
    # The run records the instance as JSON (config.json, the run list).
    recorded = validate_config("selftest", {"steps": 5, "seed": 3})
    assert recorded == as_dict(kind.validate({"steps": 5, "seed": 3}))
    assert kind.load(recorded) == kind.validate({"steps": 5, "seed": 3})
    with pytest.raises(ConfigError, match=r"^steps must be at least 1, not 0\.$"):
        kind.validate({"steps": 0})
    with pytest.raises(ConfigError, match="Unknown setting 'stepz'"):
        kind.validate({"stepz": 3})
    with pytest.raises(ConfigError, match="Unknown job kind 'nope'"):
        get_kind("nope")


def test_every_form_is_derived_from_the_config() -> None:
    for name, kind in kinds().items():
        if kind.form is not None:
            continue  # a form that depends on the values typed (rl.train's)
        fields = kind.run_form({})
        declared = {f.name for f in dataclasses.fields(kind.config)}
        assert {f["name"] for f in fields} <= declared, name


def test_the_supervisor_imports_every_kind_without_the_heavy_libraries() -> None:
    probe = (
        "import json, sys\n"
        "from engine.jobs.registry import kinds\n"
        "names = sorted(kinds())\n"
        f"print(json.dumps([names, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    names, heavy = json.loads(out.stdout)
    assert "rl.train" in names and "export.gguf" in names
    assert heavy == []


def test_the_studio_lists_runs_by_the_engine_declaration() -> None:
    catalog = JobKindCatalog()
    catalog.update({k.name: k.catalog_entry() for k in kinds().values()})
    assert catalog.is_training("rl.train") and catalog.is_training("flow.run")
    assert not catalog.is_training("export.gguf")
    assert catalog.label("export.gguf") == "GGUF export"
    assert catalog.counts_steps("rl.train") and not catalog.counts_steps("hub.download")
    # A kind an older engine does not declare is shown by its name.
    assert catalog.label("some.future.kind") == "some.future.kind"
    assert not catalog.is_training("some.future.kind")


CONFIG_READS_MAX = 40
"""Issue 28's bound on ``cfg[...]`` / ``config[...]`` reads in engine/ (499
before the typed contract): what is left reads JSON that is not a job's
settings (a model's config.json, a request the engine builds)."""


def test_jobs_read_their_settings_as_attributes() -> None:
    reads = {
        str(path.relative_to(REPO)): text.count("cfg[") + text.count("config[")
        for path in (REPO / "engine").rglob("*.py")
        for text in [path.read_text()]
    }
    total = sum(reads.values())
    worst = sorted(reads.items(), key=lambda kv: -kv[1])[:5]
    assert total <= CONFIG_READS_MAX, f"{total} dict reads of configs: {worst}"
