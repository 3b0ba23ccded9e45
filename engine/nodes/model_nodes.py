"""Model nodes: register a trained policy in the project's model list.

Only the supervisor writes the project database: the Register node returns
the model in ``NodeResult.models``, the flow job lists it in its summary's
``models``, and the supervisor (or ``rl-studio-engine run``) registers it
when the run ends, with the flow run as its source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.flow import ParamSpec, PortSpec
from engine.nodes.base import NodeError, NodeResult, NodeRun
from engine.nodes.registry import node_type


@node_type(
    "models.register",
    title="Register model",
    category="Models",
    inputs=(
        PortSpec("policy", "policy", help="The policy to add to the project's models."),
        PortSpec(
            "report",
            "report",
            required=False,
            help="An evaluation whose results are stored with the model.",
        ),
    ),
    params=(
        ParamSpec(
            "name",
            "str",
            "",
            help="Name in the model list; empty: the policy's own name.",
            label="Model name",
        ),
    ),
)
def register_model(node: NodeRun) -> NodeResult:
    """Add the policy (with its evaluation, if linked) to the project's models
    when the run ends."""
    policy = node.input("policy")
    main = Path(policy["file"])
    if not main.is_file():
        raise NodeError(f"The policy file {main} does not exist.")
    extra = [f for f in policy.get("extra_files", []) if Path(f).exists()]
    env = policy.get("env") or {}
    metrics: dict[str, Any] = dict(policy.get("metrics", {}))
    report = node.inputs.get("report")
    if report:
        for key in ("mean_reward", "std_reward", "success_rate", "mean_length"):
            if report.get(key) is not None:
                metrics[f"eval/{key}"] = report[key]
    name = node.params["name"].strip() or policy.get("name") or main.parent.name
    entry = {
        "name": name,
        "kind": "sb3-policy",
        "file": str(main),
        "extra_files": extra,
        "env": env.get("id", ""),
        "algo": policy.get("algo", ""),
        "metrics": metrics,
    }
    node.log(f"model {name!r} will be registered when the run ends")
    return NodeResult(outputs={}, summary={"name": name}, models=[entry])
