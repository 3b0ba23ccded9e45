"""Settings declared once: the config dataclasses are the one declaration,
and the run form, the flow nodes and validation agree with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import flow
from engine.errors import ConfigError
from engine.llm import flow_nodes as llm_nodes
from engine.llm.datasets import DatasetConfig
from engine.llm.train import TrainConfig as LLMTrainConfig
from engine.nodes import rl_nodes
from engine.nodes.registry import specs
from engine.rl.config import ALGO_CONFIGS, DEFAULT_TOTAL_STEPS, TrainConfig
from engine.rl.schema import HP_PREFIX, schema
from engine.settings import FieldInfo, check_value, fields_of

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples" / "flows"


def _assert_agrees(
    param: flow.ParamSpec, info: FieldInfo, default: object, help: str = ""
) -> None:
    where = f"{param.name}: node parameter and job field"
    assert param.default == default, f"{where} disagree on the default"
    help = help or info.help
    assert param.help == help and param.help, f"{where} disagree on the help"
    if param.type in ("int", "float"):
        assert (param.min, param.max, param.exclusive_min, param.exclusive_max) == (
            info.min,
            info.max,
            info.exclusive_min,
            info.exclusive_max,
        ), f"{where} disagree on the bounds"
    assert tuple(param.choices) == info.choices, f"{where} disagree on the choices"
    assert param.optional == info.optional or default is None


def test_train_sb3_node_agrees_with_the_rl_train_dataclasses() -> None:
    spec = specs()["rl.train"]
    run_fields = fields_of(TrainConfig)
    for name in rl_nodes.RUN_PARAMS:
        info = run_fields[name]
        _assert_agrees(spec.param(name), info, info.default)  # type: ignore[arg-type]
    for name, infos in rl_nodes.HYPERPARAMETERS.items():
        param = spec.param(name)
        assert param is not None and param.optional and param.default is None
        # a hyperparameter typed the same by every algorithm keeps its bounds
        # (the help is the first algorithm's: PPO says "Adam", A2C "Optimizer")
        assert param.help == infos[0].help
        if param.type != "str":
            for info in infos:
                _assert_agrees(param, info, None, help=infos[0].help)
    # the drift: the node said 50,000 / 0 / 0, the dialog 100,000 /
    # none / 10,000; both now come from TrainConfig
    assert spec.param("total_steps").default is None  # type: ignore[union-attr]
    assert spec.param("seed").default is None  # type: ignore[union-attr]
    assert spec.param("eval_every_steps").default == 10_000  # type: ignore[union-attr]
    assert spec.param("hyperparameters") is None  # typed fields, no JSON text


def test_evaluate_node_takes_its_parameters_from_its_dataclass() -> None:
    spec = specs()["rl.evaluate"]
    infos = fields_of(rl_nodes.EvaluateConfig)
    assert [p.name for p in spec.params] == list(infos)
    for name, info in infos.items():
        _assert_agrees(spec.param(name), info, info.default)  # type: ignore[arg-type]
    assert spec.param("episodes").default == 10  # type: ignore[union-attr]
    with pytest.raises(ConfigError) as caught:
        check_value(infos["episodes"], 0)
    assert str(caught.value) == "episodes must be at least 1, not 0."


def test_fine_tune_node_agrees_with_the_llm_train_dataclass() -> None:
    spec = specs()["llm.train"]
    infos = fields_of(LLMTrainConfig)
    for name in llm_nodes.TRAIN_PARAMS:
        _assert_agrees(spec.param(name), infos[name], infos[name].default)  # type: ignore[arg-type]
    lr = spec.param("learning_rate")
    assert lr is not None and (lr.min, lr.max) == (0, 1)


@pytest.mark.parametrize(
    ("node_type", "config"),
    [
        ("llm.collect", "engine.llm.rollouts:CollectConfig"),
        ("llm.evaluate", "engine.llm.rollouts:EvaluateConfig"),
        ("llm.dataset", "engine.llm.datasets:DatasetConfig"),
        ("llm.merge", "engine.llm.merge:MergeConfig"),
    ],
)
def test_language_model_nodes_agree_with_their_jobs(
    node_type: str, config: str
) -> None:
    import importlib

    module, _, name = config.partition(":")
    infos = fields_of(getattr(importlib.import_module(module), name))
    spec = specs()[node_type]
    shared = [p for p in spec.params if p.name in infos]
    assert shared  # the node's parameters for its job's settings
    for param in shared:
        info = infos[param.name]
        if param.name == "name":
            continue  # the node's name is the model's display name
        _assert_agrees(param, info, info.default)


def test_run_form_and_train_node_defaults_come_from_the_same_dataclass() -> None:
    node = specs()["rl.train"]
    # an env without a preset (the bundled designed cartpole): every default
    # is the dataclass's
    form = {f["name"]: f for f in schema({"env": "rlstudio/cartpole-v0"})}
    for name, info in fields_of(TrainConfig).items():
        if not info.form or name == "env":
            continue
        if info.structure is not None:
            # Nested, for the envs it applies to (tests/test_curriculum_form.py);
            # the node takes it in its settings JSON.
            assert node.param(name) is None
            continue
        field = form[name]
        expected = DEFAULT_TOTAL_STEPS if name == "total_steps" else info.default
        assert field["default"] == expected, name
        assert field["help"] == info.help == node.param(name).help  # type: ignore[union-attr]
        assert field.get("min") == info.min and field.get("max") == info.max
    for name, info in fields_of(ALGO_CONFIGS["PPO"]).items():
        if name == "net_arch":
            assert HP_PREFIX + name not in form  # a list: not a form field
            continue
        assert form[HP_PREFIX + name]["default"] == info.default, name
        assert form[HP_PREFIX + name]["help"] == node.param(name).help  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("n_steps", 0, "n_steps must be at least 1, not 0."),
        ("n_steps", 2.5, "n_steps must be a whole number, not 2.5."),
        ("n_steps", True, "n_steps must be a whole number, not True."),
        ("gamma", 0, "gamma must be greater than 0, not 0."),
        ("gamma", 2, "gamma must be at most 1, not 2."),
        ("learning_rate", "fast", "learning_rate must be a number, not 'fast'."),
        ("activation", "gelu", "activation must be one of tanh, relu, elu"),
        ("net_arch", [64, 0], "Each item of net_arch must be at least 1, not 0."),
        ("ortho_init", 1, "ortho_init must be true or false, not 1."),
        ("batch_size", None, "batch_size needs a value."),
    ],
)
def test_one_checker_for_every_field(name: str, value: object, message: str) -> None:
    info = fields_of(ALGO_CONFIGS["PPO"])[name]
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as err:
        check_value(info, value, f"hyperparameters.{name}")
    assert err.value.field == f"hyperparameters.{name}"


def test_checker_coerces_harmless_differences() -> None:
    ppo = fields_of(ALGO_CONFIGS["PPO"])
    assert check_value(ppo["n_steps"], 64.0) == 64
    assert check_value(ppo["learning_rate"], 1) == 1.0
    assert check_value(ppo["target_kl"], None) is None
    assert check_value(fields_of(ALGO_CONFIGS["SAC"])["ent_coef"], 0.1) == "0.1"


def test_a_declared_rule_checks_a_given_value_where_it_is_found() -> None:
    # llm.dataset's name declares store.paths.checked_name: a value that
    # would escape its folder is refused by the config's one checker, under
    # the path it was found at; no name (None) is not checked.
    info = fields_of(DatasetConfig)["name"]
    assert check_value(info, None) is None
    assert check_value(info, "traces-1") == "traces-1"
    with pytest.raises(ConfigError, match="cannot be used in a file name") as err:
        check_value(info, "../outside", "stages.name")
    assert err.value.field == "stages.name"


def test_a_saved_train_node_with_json_hyperparameters_still_loads(
    tmp_path: Path,
) -> None:
    data = json.loads((EXAMPLES / "cartpole_ppo.flow.json").read_text())
    train = next(n for n in data["nodes"] if n["id"] == "train")
    # as flows were saved before typed hyperparameters
    train["params"]["hyperparameters"] = json.dumps(
        {"n_steps": 64, "net_arch": [32, 32], "learning_rate": 0.001}
    )
    train["params"]["n_envs"] = 0
    path = tmp_path / "old.flow.json"
    path.write_text(json.dumps(data))
    doc = flow.load(path)
    params = doc.node("train").params
    assert "hyperparameters" not in params and params["n_envs"] is None
    assert params["n_steps"] == 64 and params["learning_rate"] == 0.001
    assert params["net_arch"] == "32, 32"
    assert flow.param_errors(params, specs()["rl.train"]) == []
    assert rl_nodes._hyperparameter_value("net_arch", "32, 32") == [32, 32]
    assert rl_nodes._hyperparameter_value("ent_coef", "0.01") == 0.01
    assert rl_nodes._hyperparameter_value("ent_coef", "auto_0.1") == "auto_0.1"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.flow.json")), ids=str)
def test_bundled_flows_have_no_parameter_errors(path: Path) -> None:
    doc = flow.load(path)
    catalog = specs()
    for node in doc.nodes:
        assert flow.param_errors(node.params, catalog[node.type]) == [], node.id


def test_the_train_node_sends_only_what_the_user_changed(tmp_path: Path) -> None:
    class Node:  # what train_config reads of a NodeRun
        params = {
            **specs()["rl.train"].defaults(),
            "total_steps": 3000,
            "n_steps": 64,
            "net_arch": "32, 32",
        }
        project_dir = tmp_path

        def input(self, port: str) -> dict[str, object]:
            return {"id": "CartPole-v1", "kwargs": {}}

    config = rl_nodes.train_config(Node())  # type: ignore[arg-type]
    assert config == {
        "env": "CartPole-v1",
        "env_kwargs": {},
        "total_steps": 3000,
        "hyperparameters": {"n_steps": 64, "net_arch": [32, 32]},
        "project_dir": str(tmp_path),
    }


def test_saved_language_model_nodes_with_zero_for_empty_still_load(
    tmp_path: Path,
) -> None:
    data = json.loads((EXAMPLES / "jira_llm_grpo.flow.json").read_text())
    nodes = {n["id"]: n for n in data["nodes"]}
    nodes["train"]["params"].update(lora_rank=0, batch_size=0, num_generations=0)
    nodes["collect"]["params"]["max_steps"] = 0
    path = tmp_path / "old.flow.json"
    path.write_text(json.dumps(data))
    doc = flow.load(path)
    train = doc.node("train").params
    assert train["lora_rank"] is train["batch_size"] is train["num_generations"] is None
    assert doc.node("collect").params["max_steps"] is None
    catalog = specs()
    for node in doc.nodes:
        assert flow.param_errors(node.params, catalog[node.type]) == [], node.id


def test_same_named_passes_settings_on_under_their_names() -> None:
    from dataclasses import dataclass

    from engine.settings import same_named

    @dataclass(frozen=True)
    class Cfg:
        gamma: float = 0.9
        tau: float = 0.5

    assert same_named(Cfg(), "gamma tau") == {"gamma": 0.9, "tau": 0.5}
    assert same_named(Cfg(tau=1.0), ["tau"]) == {"tau": 1.0}
    with pytest.raises(AttributeError):
        same_named(Cfg(), "gamma lr")
