"""Environment nodes: pick a Gymnasium or designed environment.

The ``env`` value that travels along links is a small JSON reference, not an
environment object::

    {"id": "rlstudio/jira_issue_resolution-v0", "kwargs": {},
     "designed": true, "spec_file": ".../envs/jira_issue_resolution.env.json",
     "fingerprint": "3f0c...", "action_space": "Discrete",
     "action_kind": "discrete", "observation_kind": "vector",
     "has_action_masks": true}

Consumers build the environment from ``id`` and ``kwargs`` (after
registering the project's designed envs). ``fingerprint`` changes when the
designed spec or a file it references changes, so downstream results that
depend on it are recomputed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from engine import contract
from engine.flow import ParamSpec, PortSpec
from engine.nodes.base import NodeError, NodeResult, NodeRun, json_object_check
from engine.nodes.registry import node_type


def resolve_env_id(value: str, project_dir: Path) -> str:
    """``CartPole-v1`` and ``rlstudio/x-v0`` stay; a bare designed env name
    (``jira_issue_resolution``) becomes ``rlstudio/<name>-v0``."""
    value = value.strip()
    if not value:
        raise NodeError("Choose an environment: a Gymnasium id or a designed env.")
    bare = "/" not in value and "-v" not in value
    if bare and contract.spec_file(project_dir, value).is_file():
        return contract.env_id(value)
    return value


@node_type(
    "env.environment",
    title="Environment",
    category="Environments",
    outputs=(
        PortSpec(
            "env",
            "env",
            help="A reference to the environment (id, arguments, fingerprint).",
        ),
    ),
    params=(
        ParamSpec(
            "env",
            "str",
            "CartPole-v1",
            help="A Gymnasium id (CartPole-v1), a designed env id "
            "(rlstudio/<name>-v0) or the name of a designed env of the project.",
            label="Environment",
            picker="env",
        ),
        ParamSpec(
            "kwargs",
            "str",
            "{}",
            help="Keyword arguments for gymnasium.make as a JSON object, e.g. "
            '{"max_episode_steps": 200}.',
            label="Arguments (JSON)",
        ),
        ParamSpec(
            "check",
            "bool",
            False,
            help="Run every check of a designed environment (Gymnasium and SB3 "
            "env checkers, determinism, reachability) before use.",
            label="Check designed env",
        ),
    ),
    cacheable=False,
    check=json_object_check("kwargs"),
)
def environment(node: NodeRun) -> NodeResult:
    """A Gymnasium environment or one designed in the studio, checked by
    building it once."""
    from engine.envs import register_project_envs
    from engine.envs.spec import designed_spec_file
    from engine.nodes.base import parse_json_object
    from engine.rl.env_info import inspect_env

    project = node.project_dir
    register_project_envs(project)
    env_id = resolve_env_id(str(node.params["env"]), project)
    kwargs = parse_json_object(node.params["kwargs"], "kwargs")
    node.progress(0, 1, f"building {env_id}")
    info = inspect_env(env_id, kwargs)  # ConfigError: one sentence
    ref: dict[str, Any] = {
        "id": env_id,
        "kwargs": kwargs,
        "designed": contract.env_name(env_id) is not None,
        "action_space": info.action_space,
        "action_kind": info.action_kind,
        "observation_kind": info.observation_kind,
        "has_action_masks": info.has_action_masks,
    }
    files: list[str] = []
    spec_file = designed_spec_file(env_id, project)
    if spec_file is not None:
        from engine.envs import load_spec

        spec = load_spec(spec_file)
        digest = hashlib.sha256(spec_file.read_bytes()).hexdigest()[:16]
        ref["spec_file"] = str(spec_file)
        ref["fingerprint"] = f"{digest}:{spec.fingerprint()}"
        files.append(str(spec_file))
        if node.params["check"]:
            from engine.envs import check_spec

            node.progress(0.5, 1, "checking the design")
            report = check_spec(spec)
            if not report.ok:
                first = report.errors[0]
                where = f"{first.path}: " if first.path else ""
                raise NodeError(
                    f"The designed env {spec.name!r} fails its checks: "
                    f"{where}{first.message}"
                )
    node.progress(1, 1, env_id)
    return NodeResult(
        outputs={"env": ref},
        summary={"env": env_id, "action_space": info.action_space},
        files=files,
    )
