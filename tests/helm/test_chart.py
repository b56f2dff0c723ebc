"""The Helm chart (deploy/helm/switchyard), checked without a cluster.

For each set of values a user would install with (the defaults: a trial with everything bundled;
the examples under deploy/helm/switchyard/examples; a user-managed Secret; SQLite; the EPP alone
and beside the fleet): `helm lint` and `helm lint --strict` pass, `helm template` renders, and the
rendered manifests are
- decoded strictly as the Kubernetes API types they claim to be (tests/helm/kubecheck: unknown or
  mistyped fields fail, as the API server would refuse or silently drop them);
- carrying a configuration the gateway loads: the ConfigMap's switchyard.yaml is written out and
  `switchyard check --offline` run on it, with exactly the environment the pods get from the
  rendered Secret, so every ${VAR} the config names is proven to come from the Secret;
- wired as the issue asks: PDB and HPA on the gateway's pods, probes on /health and /ready (gRPC
  liveness and readiness on the EPP), terminationGracePeriodSeconds above the preStop sleep plus
  the config's own shutdown_grace, the EPP's Deployment, Service (appProtocol http2) and RBAC
  present only when enabled, and the example InferencePool naming that Service;
- refused at render time, with the reason, where values contradict each other.

Run by tests/helm/check, which builds Helm (scripts/helm) and the strict decoder. Environment:
HELM, KUBECHECK (their paths), SWITCHYARD_BIN (default target/debug/switchyard).
"""

import base64
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/helm/switchyard"
EXAMPLES = CHART / "examples"
HELM = os.environ.get("HELM") or str(ROOT / "target/helm/helm")
KUBECHECK = os.environ.get("KUBECHECK") or str(ROOT / "target/helm/kubecheck")
SWITCHYARD = os.environ.get("SWITCHYARD_BIN") or str(ROOT / "target/debug/switchyard")
RELEASE, NAMESPACE = "sy", "llm"

EXTERNAL_URLS = [
    "--set", "postgresql.external.url=postgres://switchyard:pw@pg.db.svc.cluster.local:5432/switchyard?sslmode=require",
    "--set", "redis.external.url=redis://:pw@redis.db.svc.cluster.local:6379/0",
    "--set", "secrets.env.OPENAI_API_KEY=sk-test-key",
]
EPP_DNS = [
    "--set", "epp.enabled=true",
    "--set", "epp.pools[0].name=qwen",
    "--set", "epp.pools[0].models[0]=Qwen/Qwen3-8B",
    "--set", "epp.pools[0].dns.name=vllm-qwen.llm.svc.cluster.local",
    "--set", "epp.pools[0].dns.port=8000",
    "--set", "epp.pools[1].name=static",
    "--set", "epp.pools[1].models[0]=m",
    "--set", "epp.pools[1].endpoints[0]=10.0.0.5:8000",
]

# name -> helm arguments (values files and --set), what the render must hold.
SCENARIOS = {
    "defaults (trial: bundled Redis and PostgreSQL, mock backend)": [],
    "examples/values-external.yaml (your PostgreSQL and Redis)": ["-f", str(EXAMPLES / "values-external.yaml"), *EXTERNAL_URLS],
    "external, every secret in your own Secret": [
        "-f", str(EXAMPLES / "values-external.yaml"), "--set", "secrets.existingSecret=switchyard-secrets",
    ],
    "bundled PostgreSQL, no Redis, fixed replicas, minAvailable": [
        "--set", "redis.mode=none", "--set", "autoscaling.enabled=false", "--set", "replicaCount=3",
        "--set", "podDisruptionBudget.minAvailable=2", "--set", "podDisruptionBudget.maxUnavailable=null",
        "--set", "mock.enabled=false", "--set", "drain.preStopSleepSeconds=0",
        "--set", "drain.terminationGracePeriodSeconds=45",
    ],
    "external PostgreSQL, bundled Redis": [
        "--set", "postgresql.mode=external", "--set", EXTERNAL_URLS[1].replace("--set ", ""),
    ],
    "examples/values-sqlite.yaml (one pod)": ["-f", str(EXAMPLES / "values-sqlite.yaml")],
    "examples/values-epp.yaml (the EPP alone)": ["-f", str(EXAMPLES / "values-epp.yaml")],
    "the fleet and the EPP in one release": ["-f", str(EXAMPLES / "values-epp.yaml"), "--set", "gateway.enabled=true"],
    "the EPP with the fleet's keys, limits and budgets (epp.fleetState)": [
        "-f", str(EXAMPLES / "values-epp.yaml"), "--set", "gateway.enabled=true", "--set", "epp.fleetState=true",
    ],
    "EPP with dns and static pools, no RBAC": [*EPP_DNS, "--set", "epp.rbac.create=false"],
}


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([HELM, *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)}\n{proc.stdout}\n{proc.stderr}")
    return proc


def render(args: list[str]) -> list[dict]:
    out = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kinds(docs: list[dict], kind: str, component: str | None = None) -> list[dict]:
    found = [d for d in docs if d["kind"] == kind]
    if component is not None:
        found = [d for d in found if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component]
    return found


def one(docs: list[dict], kind: str, component: str) -> dict:
    found = kinds(docs, kind, component)
    assert len(found) == 1, f"expected one {kind} of {component}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def seconds(duration: str) -> float:
    """A Switchyard duration (250ms, 30s, 5m, 1h) in seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration)
    assert m, f"not a duration: {duration!r}"
    return float(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m[2]]


def secret_env(docs: list[dict], scenario_args: list[str]) -> dict[str, str]:
    """The environment the gateway's pods get through envFrom: the rendered Secret's keys, or,
    for a Secret the user brings, the keys values.yaml tells them to put in it."""
    secrets = kinds(docs, "Secret")
    if secrets:
        assert len(secrets) == 1
        s = secrets[0]
        env = dict(s.get("stringData", {}))
        env.update({k: base64.b64decode(v).decode() for k, v in s.get("data", {}).items()})
        return env
    assert any(a.startswith("secrets.existingSecret=") for a in scenario_args)
    return {
        "SWITCHYARD_MASTER_KEY": "sk-sy-" + "m" * 40,
        "SWITCHYARD_SECRET": "s" * 48,
        "SWITCHYARD_DATABASE_URL": "postgres://u:p@pg:5432/db",
        "SWITCHYARD_REDIS_URL": "redis://redis:6379/0",
        "OPENAI_API_KEY": "sk-test",
    }


def switchyard_check(config_text: str, env: dict[str, str]) -> str:
    """`switchyard check --offline` on the config, with only `env` (and PATH) in the environment."""
    if not Path(SWITCHYARD).exists():
        pytest.fail(f"{SWITCHYARD} not found: build the gateway first (cargo build), or set SWITCHYARD_BIN")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "switchyard.yaml"
        path.write_text(config_text)
        proc = subprocess.run(
            [SWITCHYARD, "check", "--offline", "--config", str(path)],
            capture_output=True, text=True, cwd=tmp, timeout=60,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        )
    assert proc.returncode == 0, f"switchyard check refused the chart's config:\n{config_text}\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def container(deployment: dict, name: str) -> dict:
    (c,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c


def pre_stop_sleep(c: dict) -> int:
    hook = c.get("lifecycle", {}).get("preStop")
    if not hook:
        return 0
    cmd = hook["exec"]["command"]
    assert cmd[0] == "sleep", cmd
    return int(cmd[1])


def assert_selects(selector: dict, pod_labels: dict, what: str) -> None:
    for k, v in selector.items():
        assert pod_labels.get(k) == v, f"{what}: selector {k}={v} does not match the pods' labels {pod_labels}"


@pytest.fixture(scope="module", params=list(SCENARIOS), ids=list(SCENARIOS))
def scenario(request):
    args = SCENARIOS[request.param]
    return args, render(args)


def test_lint_and_lint_strict(scenario):
    args, _ = scenario
    for strict in ([], ["--strict"]):
        proc = helm("lint", str(CHART), "--namespace", NAMESPACE, *strict, *args)
        assert "0 chart(s) failed" in proc.stdout, proc.stdout + proc.stderr


def kubecheck(manifests: str) -> None:
    """tests/helm/kubecheck: every document decodes strictly as its Kubernetes (or Gateway API,
    or Inference Extension) Go type."""
    if not Path(KUBECHECK).exists():
        pytest.fail(f"{KUBECHECK} not found: tests/helm/check builds it")
    proc = subprocess.run([KUBECHECK], input=manifests, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_manifests_decode_strictly_as_kubernetes_types(scenario):
    args, _ = scenario
    # helm's own output, not a re-serialisation: a key written twice must not be merged away.
    kubecheck(helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args).stdout)


def test_gateway(scenario):
    args, docs = scenario
    gateway_on = bool(kinds(docs, "Deployment", "gateway"))
    expected_on = "gateway.enabled=false" not in " ".join(args) and "values-epp.yaml" not in " ".join(args) \
        or "gateway.enabled=true" in args
    assert gateway_on == expected_on
    if not gateway_on:
        assert not kinds(docs, "ConfigMap", "gateway") and not kinds(docs, "Secret")
        assert not kinds(docs, "HorizontalPodAutoscaler") and not kinds(docs, "PodDisruptionBudget", "gateway")
        return
    deployment = one(docs, "Deployment", "gateway")
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert_selects(deployment["spec"]["selector"]["matchLabels"], labels, "Deployment")
    gw = container(deployment, "switchyard")
    assert gw["args"] == ["serve", "--config", "/etc/switchyard/switchyard.yaml"]

    config_map = one(docs, "ConfigMap", "gateway")
    config_text = config_map["data"]["switchyard.yaml"]
    config = yaml.safe_load(config_text)

    # The config loads, with the environment the Secret gives the pods.
    env = secret_env(docs, args)
    assert gw["envFrom"] == [{"secretRef": {"name": kinds(docs, "Secret")[0]["metadata"]["name"]
                                            if kinds(docs, "Secret") else "switchyard-secrets"}}]
    referenced = set(re.findall(r"\$\{([A-Za-z0-9_]+)(?::-[^}]*)?\}", config_text))
    missing = referenced - set(env)
    assert not missing, f"the config names {missing}, which the Secret does not hold"
    assert {"SWITCHYARD_MASTER_KEY", "SWITCHYARD_SECRET"} <= referenced
    out = switchyard_check(config_text, env)
    assert "config OK" in out, out

    # Storage and Redis follow the modes.
    joined = " ".join(args)
    if "values-sqlite.yaml" in joined:
        assert config["storage"]["url"].startswith("sqlite:///var/lib/switchyard/")
        assert "redis" not in config
        assert not kinds(docs, "StatefulSet") and not kinds(docs, "Deployment", "redis")
    elif "values-external.yaml" in joined:
        assert config["storage"]["url"] == "${SWITCHYARD_DATABASE_URL}"
        assert config["redis"]["url"] == "${SWITCHYARD_REDIS_URL}"
        assert not kinds(docs, "StatefulSet", "postgresql") and not kinds(docs, "Deployment", "redis")
    if "postgresql.mode=external" in joined and "redis.mode" not in joined:
        assert one(docs, "Deployment", "redis") and not kinds(docs, "StatefulSet")
    if not args or "redis.mode=none" in joined:
        pg = one(docs, "StatefulSet", "postgresql")
        pg_service = one(docs, "Service", "postgresql")
        assert pg_service["metadata"]["name"] in config["storage"]["url"]
        assert_selects(pg_service["spec"]["selector"], pg["spec"]["template"]["metadata"]["labels"], "PostgreSQL Service")
        password = [e for e in container(pg, "postgresql")["env"] if e["name"] == "POSTGRES_PASSWORD"][0]
        assert password["valueFrom"]["secretKeyRef"]["key"] == "POSTGRES_PASSWORD"
        assert "${POSTGRES_PASSWORD}" in config["storage"]["url"]
    if not args:
        redis_service = one(docs, "Service", "redis")
        assert config["redis"]["url"] == f"redis://{redis_service['metadata']['name']}:6379/0"
        mock_service = one(docs, "Service", "mock")
        assert {"name": "mock", "type": "openai", "url": f"http://{mock_service['metadata']['name']}:8000"} in config["backends"]
    if "redis.mode=none" in joined:
        assert "redis" not in config and not kinds(docs, "Deployment", "redis")

    # Probes: /health and /ready on the listen port.
    port = int(config["listen"].rsplit(":", 1)[1])
    assert config["listen"] == f"0.0.0.0:{port}"
    (http_port,) = [p for p in gw["ports"] if p["name"] == "http"]
    assert http_port["containerPort"] == port
    assert gw["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert gw["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert gw["startupProbe"]["httpGet"]["path"] == "/health"
    service = one(docs, "Service", "gateway")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert_selects(service["spec"]["selector"], labels, "gateway Service")

    # Drain: the kubelet kills the pod terminationGracePeriodSeconds after the preStop hook began;
    # the hook's sleep plus the gateway's own shutdown_grace must fit inside it.
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    sleep = pre_stop_sleep(gw)
    assert grace > sleep + seconds(config["shutdown_grace"]), (grace, sleep, config["shutdown_grace"])
    if "drain.preStopSleepSeconds=0" in joined:
        assert sleep == 0 and "lifecycle" not in gw
    else:
        assert sleep > 0

    # PDB (off only in the one-pod example, where it could only block a node's drain) and HPA.
    if "values-sqlite.yaml" in joined:
        assert not kinds(docs, "PodDisruptionBudget")
    else:
        pdb = one(docs, "PodDisruptionBudget", "gateway")
        assert_selects(pdb["spec"]["selector"]["matchLabels"], labels, "PodDisruptionBudget")
        assert ("minAvailable" in pdb["spec"]) != ("maxUnavailable" in pdb["spec"])
        if "podDisruptionBudget.minAvailable=2" in joined:
            assert pdb["spec"]["minAvailable"] == 2
    hpas = kinds(docs, "HorizontalPodAutoscaler")
    if "autoscaling.enabled=false" in joined or "values-sqlite.yaml" in joined:
        assert not hpas
        assert deployment["spec"]["replicas"] >= 1
    else:
        (hpa,) = hpas
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": deployment["metadata"]["name"]}
        assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
        assert hpa["spec"]["metrics"]
        # The HPA owns the replica count: the Deployment leaves it alone.
        assert "replicas" not in deployment["spec"]
        assert gw["resources"]["requests"]["cpu"], "a CPU target needs a CPU request"

    # The pod's filesystem: read-only but for the data volume the journal (and SQLite) live on.
    assert gw["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in gw["volumeMounts"]}
    assert config["storage"]["usage_journal_dir"].startswith("/var/lib/switchyard/") and "/var/lib/switchyard" in mounts


def test_epp(scenario):
    args, docs = scenario
    joined = " ".join(args)
    enabled = "values-epp.yaml" in joined or "epp.enabled=true" in joined
    parts = [d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "epp"]
    if not enabled:
        assert not parts, [f"{d['kind']}/{d['metadata']['name']}" for d in parts]
        assert not kinds(docs, "Role") and not kinds(docs, "RoleBinding")
        return
    deployment = one(docs, "Deployment", "epp")
    pod = deployment["spec"]["template"]
    epp = container(deployment, "epp")
    config_map = one(docs, "ConfigMap", "epp")
    config_text = config_map["data"]["switchyard.yaml"]
    config = yaml.safe_load(config_text)
    listen = int(config["epp"]["listen"].rsplit(":", 1)[1])
    health = int(config["epp"]["health_listen"].rsplit(":", 1)[1])

    # The HTTP listener serve runs beside the picker is not reachable from outside the pod.
    assert config["listen"].startswith("127.0.0.1:")

    # The config loads, with the environment the pod gets.
    if "epp.fleetState=true" in joined:
        # The fleet's database, Redis and keys, through the fleet's Secret.
        fleet = yaml.safe_load(one(docs, "ConfigMap", "gateway")["data"]["switchyard.yaml"])
        assert config["storage"]["url"] == fleet["storage"]["url"]
        assert config["redis"]["url"] == fleet["redis"]["url"]
        assert config["auth"] == fleet["auth"]
        assert epp["envFrom"] == container(one(docs, "Deployment", "gateway"), "switchyard")["envFrom"]
        switchyard_check(config_text, secret_env(docs, args))
    else:
        # A picker of its own: no Secret, no variable, nothing recorded.
        assert "envFrom" not in epp and "${" not in config_text
        assert "redis" not in config and "auth" not in config
        assert config["storage"]["record_usage"] is False
        switchyard_check(config_text, {})
    for pool in config["epp"]["pools"]:
        if "inference_pool" in pool:
            assert pool["inference_pool"]["namespace"] == NAMESPACE

    # gRPC on 9002 behind a Service with appProtocol http2; gRPC health probes on 9003.
    ports = {p["name"]: p["containerPort"] for p in epp["ports"]}
    assert ports == {"grpc": listen, "grpc-health": health} and (listen, health) == (9002, 9003)
    assert epp["livenessProbe"]["grpc"] == {"port": health, "service": "liveness"}
    assert epp["readinessProbe"]["grpc"] == {"port": health, "service": "readiness"}
    service = one(docs, "Service", "epp")
    (port,) = service["spec"]["ports"]
    assert port == {"name": "grpc", "port": 9002, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "http2"}
    assert_selects(service["spec"]["selector"], pod["metadata"]["labels"], "EPP Service")
    gateway = kinds(docs, "Deployment", "gateway")
    if gateway:  # the two Services select apart
        assert service["spec"]["selector"] != one(docs, "Service", "gateway")["spec"]["selector"]

    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > pre_stop_sleep(epp) + seconds(config["shutdown_grace"])

    # RBAC: read pods and InferencePools, bound to the ServiceAccount the pods run as.
    sa_name = pod["spec"]["serviceAccountName"]
    assert one(docs, "ServiceAccount", "epp")["metadata"]["name"] == sa_name
    assert pod["spec"]["automountServiceAccountToken"] is True
    if "epp.rbac.create=false" in joined:
        assert not kinds(docs, "Role") and not kinds(docs, "RoleBinding")
        return
    role = one(docs, "Role", "epp")
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in role["rules"]}
    assert rules[(("",), ("pods",))] == {"get", "list", "watch"}
    assert rules[(("inference.networking.k8s.io",), ("inferencepools",))] == {"get", "list", "watch"}
    binding = one(docs, "RoleBinding", "epp")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa_name, "namespace": NAMESPACE}]


# ---------------------------------------------------------------------------------------------
# Values that cannot work are refused at render time, with the reason.

@pytest.mark.parametrize("args, message", [
    (["--set", "drain.terminationGracePeriodSeconds=35"], "must exceed drain.preStopSleepSeconds + drain.shutdownGraceSeconds"),
    (["--set", "config.listen=0.0.0.0:1"], "config.listen is set by the chart"),
    (["--set", "config.storage.url=sqlite://x.db"], "config.storage.url is set by the chart"),
    (["--set", "config.auth.master_key=abcdefgh"], "come from the Secret"),
    (["--set", "postgresql.mode=sqlite"], "one pod"),
    (["--set", "postgresql.mode=external"], "postgresql.mode external needs"),
    (["--set", "redis.mode=external"], "redis.mode external needs"),
    (["--set", "secrets.secret=short"], "at least 32 characters"),
    (["--set", "epp.enabled=true"], "at least one pool"),
    (["-f", str(EXAMPLES / "values-sqlite.yaml"), *EPP_DNS, "--set", "epp.fleetState=true"], "not with postgresql.mode sqlite"),
    (["-f", str(EXAMPLES / "values-epp.yaml"), "--set", "epp.fleetState=true"], "needs the fleet's Secret"),
    (["--set", "podDisruptionBudget.minAvailable=1"], "not both"),
    (["--set", "redis.mode=sentinel"], "redis/mode"),
])
def test_contradictory_values_are_refused(args, message):
    proc = helm("template", RELEASE, str(CHART), *args, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_generated_secrets_are_strong_and_kept():
    (secret,) = kinds(render([]), "Secret")
    data = secret["stringData"]
    assert len(data["SWITCHYARD_MASTER_KEY"]) >= 8 and len(data["SWITCHYARD_SECRET"]) >= 32
    assert re.fullmatch(r"[A-Za-z0-9]{32}", data["POSTGRES_PASSWORD"])
    # Kept on uninstall (virtual keys are hashed under SWITCHYARD_SECRET), looked up on upgrade.
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert 'lookup "v1" "Secret"' in (CHART / "templates/secret.yaml").read_text()


# ---------------------------------------------------------------------------------------------
# The example InferencePool and HTTPRoute.

def test_example_inference_pool_names_the_epp_service():
    (pool,) = yaml.safe_load_all((EXAMPLES / "inferencepool.yaml").read_text())
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1" and pool["kind"] == "InferencePool"
    # Typed by the Inference Extension's own Go types (v1 API): no field it lacks, none mistyped.
    kubecheck((EXAMPLES / "inferencepool.yaml").read_text())
    # What the v1 CRD's schema requires (its Go types cannot say): a selector with matchLabels,
    # target ports, and the picker's name, with a port when it is a Service.
    spec = pool["spec"]
    assert spec["selector"]["matchLabels"] and spec["targetPorts"] == [{"number": 8000}]
    assert spec["endpointPickerRef"]["failureMode"] in ("FailOpen", "FailClose")

    # What examples/values-epp.yaml installs as release "sy" in the pool's namespace is what the pool names.
    docs = render(["-f", str(EXAMPLES / "values-epp.yaml")])
    service = one(docs, "Service", "epp")
    ref = spec["endpointPickerRef"]
    assert pool["metadata"]["namespace"] == NAMESPACE
    assert ref["name"] == service["metadata"]["name"]
    assert ref.get("kind", "Service") == "Service" and ref.get("group", "") == ""
    assert ref["port"]["number"] == service["spec"]["ports"][0]["port"]
    config = yaml.safe_load(one(docs, "ConfigMap", "epp")["data"]["switchyard.yaml"])
    assert {"name": pool["metadata"]["name"], "namespace": NAMESPACE} in [
        p.get("inference_pool") for p in config["epp"]["pools"]]


def test_example_httproute_sends_to_the_inference_pool():
    docs = list(yaml.safe_load_all((EXAMPLES / "httproute.yaml").read_text()))
    (gateway,) = [d for d in docs if d["kind"] == "Gateway"]
    (route,) = [d for d in docs if d["kind"] == "HTTPRoute"]
    (pool,) = yaml.safe_load_all((EXAMPLES / "inferencepool.yaml").read_text())
    assert gateway["apiVersion"] == route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["metadata"]["namespace"] == pool["metadata"]["namespace"] == gateway["metadata"]["namespace"]
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "name": gateway["metadata"]["name"]}]
    (rule,) = route["spec"]["rules"]
    assert rule["backendRefs"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                    "name": pool["metadata"]["name"]}]
    # Strictly typed too: the Gateway API's Go types decode them.
    kubecheck((EXAMPLES / "httproute.yaml").read_text())
