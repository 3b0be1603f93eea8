"""deploy/kubernetes/: valid for Kubernetes and prometheus-operator, unprivileged, one rule set.

Built-in kinds are checked against Kubernetes' own OpenAPI schemas (kubernetes-validate bundles
them, strict: unknown fields refused); ServiceMonitor and PrometheusRule against the
`openAPIV3Schema` of prometheus-operator's CRDs (deploy/kubernetes/crds/, vendored, v0.93.0),
made strict the way the API server's pruning would drop unknown fields. The pod is checked by
the Pod Security Standards' `restricted` profile, which the namespace enforces.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from mirrorwatch.alerts.kubernetes import PROMETHEUS_RULE_FILE, RELEASE
from tests.alerts.tools import RULES
from tests.fleet.fleet import binary

KUBERNETES = PROMETHEUS_RULE_FILE.parent
CRDS = KUBERNETES / "crds"
# kubernetes-validate's newest bundled schemas, and the oldest Kubernetes still supported
# upstream when this was written.
KUBERNETES_VERSIONS = (kubernetes_validate.latest_version(), "1.31.0")


def documents() -> Iterator[tuple[Path, dict[str, Any]]]:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text("utf-8"))
    for name in kustomization["resources"]:
        path = KUBERNETES / name
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document:
                yield path, document


def by_kind(kind: str) -> dict[str, Any]:
    (found,) = (d for _, d in documents() if d["kind"] == kind)
    return found


BUILT_IN = [
    pytest.param(d, id=f"{p.name}:{d['kind']}")
    for p, d in documents()
    if not d["apiVersion"].startswith("monitoring.coreos.com/")
]
CUSTOM = [
    pytest.param(d, id=f"{p.name}:{d['kind']}")
    for p, d in documents()
    if d["apiVersion"].startswith("monitoring.coreos.com/")
]


# --- schemas ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("document", BUILT_IN)
def test_built_in_resources_match_the_kubernetes_schema(
    document: dict[str, Any], version: str
) -> None:
    kubernetes_validate.validate(document, version, strict=True)


def strict(schema: Any) -> Any:
    """A CRD's structural schema as JSON Schema that refuses the fields the API server would
    prune: every object with `properties` and neither `additionalProperties` nor
    `x-kubernetes-preserve-unknown-fields` gets `additionalProperties: false`."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    # The API server checks `pattern` with Go's regexp, which takes an inline flag anywhere;
    # Python's re (jsonschema) only at the start.
    pattern = out.get("pattern")
    if isinstance(pattern, str) and "(?i)" in pattern:
        out["pattern"] = "(?i)" + pattern.replace("(?i)", "")
    # int-or-string: JSON Schema has no such type.
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


def crd_schema(kind: str, version: str) -> dict[str, Any]:
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        if crd["spec"]["names"]["kind"] == kind:
            (served,) = (v for v in crd["spec"]["versions"] if v["name"] == version)
            schema: dict[str, Any] = strict(served["schema"]["openAPIV3Schema"])
            # metadata is checked by the API server itself, not by the CRD's schema.
            schema["properties"]["metadata"] = {"type": "object"}
            schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
            return schema
    raise AssertionError(f"no vendored CRD defines {kind} (deploy/kubernetes/crds/)")


@pytest.mark.parametrize("document", CUSTOM)
def test_prometheus_operator_resources_match_their_crd_schema(document: dict[str, Any]) -> None:
    version = document["apiVersion"].split("/")[1]
    jsonschema.validate(document, crd_schema(document["kind"], version))


def test_the_crd_check_refuses_a_misspelt_field() -> None:
    monitor = by_kind("ServiceMonitor")
    broken = {**monitor, "spec": {**monitor["spec"], "endpoint": monitor["spec"]["endpoints"]}}
    with pytest.raises(jsonschema.ValidationError, match="endpoint"):
        jsonschema.validate(broken, crd_schema("ServiceMonitor", "v1"))


# --- one rule set ------------------------------------------------------------------------------


def test_prometheus_rule_is_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mirrorwatch.alerts.kubernetes", "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_prometheus_rule_holds_exactly_the_generated_rule_file() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert by_kind("PrometheusRule")["spec"]["groups"] == rules["groups"]


def test_promtool_accepts_the_prometheus_rule_groups(tmp_path: Path) -> None:
    path = tmp_path / "groups.yml"
    path.write_text(yaml.safe_dump({"groups": by_kind("PrometheusRule")["spec"]["groups"]}))
    result = subprocess.run(
        [binary("promtool"), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PrometheusRule"])
def test_kube_prometheus_stack_selects_it_by_release(kind: str) -> None:
    assert by_kind(kind)["metadata"]["labels"]["release"] == RELEASE


# --- wiring: what the API server and the operator would connect ---------------------------------


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = by_kind("DaemonSet")["spec"]["template"]["spec"]
    return spec


def test_the_daemonset_selects_its_own_pods() -> None:
    daemonset = by_kind("DaemonSet")
    selector = daemonset["spec"]["selector"]["matchLabels"]
    assert selector.items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()


def test_the_service_selects_the_exporter_pods_on_their_metrics_port() -> None:
    service = by_kind("Service")
    pod_labels = by_kind("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    (container,) = pod_spec()["containers"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}


def test_the_service_monitor_selects_the_service_and_its_port() -> None:
    monitor, service = by_kind("ServiceMonitor"), by_kind("Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert service["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports


def test_the_job_prometheus_operator_gives_it_matches_the_rules() -> None:
    # prometheus-operator names the job after the Service unless spec.jobLabel says otherwise.
    monitor, service = by_kind("ServiceMonitor"), by_kind("Service")
    assert "jobLabel" not in monitor["spec"]
    assert "mirrorwatch" in service["metadata"]["name"]


def test_each_exporter_is_named_by_its_node() -> None:
    (endpoint,) = by_kind("ServiceMonitor")["spec"]["endpoints"]
    targets = {
        r["targetLabel"]
        for r in endpoint["relabelings"]
        if r["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
    }
    assert targets == {"instance", "host"}


def test_the_exporter_runs_only_on_gpu_nodes_with_the_nvidia_runtime() -> None:
    spec = pod_spec()
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    (container,) = spec["containers"]
    # It watches every GPU and takes none from the training pods.
    assert "nvidia.com/gpu" not in str(container["resources"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"


def test_the_exporter_accepts_its_arguments() -> None:
    (container,) = pod_spec()["containers"]
    exporter = Path(sys.executable).with_name("mirrorwatch-exporter")
    flags = subprocess.run(
        [str(exporter), "--help"], capture_output=True, text=True, check=True
    ).stdout
    for arg in container["args"]:
        if arg.startswith("--"):
            assert arg in flags


def test_the_pod_meets_the_restricted_pod_security_standard() -> None:
    """https://kubernetes.io/docs/concepts/security/pod-security-standards/ (restricted)."""
    spec = pod_spec()
    for namespace_sharing in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(namespace_sharing)
    assert "volumes" not in spec or all(
        set(v) - {"name"} <= {"configMap", "secret", "emptyDir", "projected"}
        for v in spec["volumes"]
    )
    pod_security = spec["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["seccompProfile"]["type"] in {"RuntimeDefault", "Localhost"}
    for container in spec["containers"]:
        security = container["securityContext"]
        assert security["privileged"] is False
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert not security["capabilities"].get("add")
        assert not any("hostPort" in p for p in container.get("ports", []))
    namespace = by_kind("Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
