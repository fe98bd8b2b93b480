"""Checks everything under deploy/ offline: run by scripts/test-deploy.

* Every kustomization renders with `kubectl kustomize`, alone and, for the
  components, combined with each variant.
* Every rendered object validates offline and strictly (unknown fields are
  errors): Kubernetes kinds against the Kubernetes 1.37 OpenAPI schemas of
  the `kubernetes-validate` package; ServiceMonitor and PodMonitor against the
  JSON schema of the pydantic models that `cloudcoil-models-prometheus-operator`
  generates from the prometheus-operator CRDs, made strict by adding
  `additionalProperties: false` to every object schema that lists properties.
* The invariants the deployment depends on hold in the rendered objects: the
  variable set in vLLM's container, the same volume at the same path in both
  containers, the exporter's mount read-only, the wipe before vLLM starts,
  probes, non-root, ports agreeing between containers, Services, monitors and
  annotations, and every exporter flag existing in `multiproc-exporter --help`.
* No exporter sidecar gates its pod's readiness: every exporter container
  that shares a pod with another running container (native sidecars
  included), in every rendering and in the docs' YAML blocks, has no
  readinessProbe, and a liveness or startup probe on /-/healthy; the
  DaemonSet's exporter, alone in its pod, is ready on /-/ready.
* The node agent (deploy/kubernetes/node-agent, `--discover.processes`):
  hostPID; capabilities ALL dropped and exactly SYS_PTRACE and
  DAC_READ_SEARCH added, as uid 0, not privileged; the only hostPaths the
  kubelet's /var/log/pods (required) and /var/log/containers, read-only;
  no --dir; its own namespace at the `privileged` Pod Security level and no
  other workload or RBAC; its PodMonitor with honorLabels: true; and the
  plain-Prometheus job in docs/deployment.md with honor_labels: true,
  keeping its pods only, through promtool.
* deploy/prometheus.yml: `promtool check config` on the file with its
  Kubernetes discovery replaced by a static target (Debian's Prometheus is
  built without Kubernetes discovery), and the discovery block itself against
  the fields and meta labels Prometheus documents for `role: pod`.
* deploy/Dockerfile: hadolint, and consistency with the repository (binary
  name, port, user, Rust version, base images as the build arguments
  BUILD_IMAGE and RUNTIME_IMAGE defaulting to the public images, build
  context after .dockerignore; with --cargo-check, `cargo check` of exactly
  that context).
* Documentation: every `kubectl apply -k`/`kubectl kustomize` path in the docs
  renders, every YAML block parses, and Kubernetes objects in them validate.

Prints one line per check and ends with "N passed, M failed"; exits 1 if any
check failed.
"""

import argparse
import copy
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.37"
# The manifests name the image after a registry placeholder (nothing is published).
EXPORTER_IMAGE = "registry.example.com/multiproc-exporter"
SIDECAR_COMPONENT = KUBERNETES / "components" / "sidecar"
PRODUCTION_STACK = ROOT / "deploy" / "helm" / "production-stack"
EXPORTER_PORT = 9089
EXPORTER_UID = 65532
WIPE_COMMAND = 'find "$PROMETHEUS_MULTIPROC_DIR" -mindepth 1 -delete'

results = []  # (name, error or None)


def check(name):
    """Decorator-free helper: run `fn` as check `name`, recording the outcome."""

    def run(fn, *args):
        try:
            fn(*args)
            results.append((name, None))
            print(f"ok    {name}")
        except Exception as e:  # a failed check, whatever raised
            results.append((name, e))
            print(f"FAIL  {name}: {type(e).__name__}: {e}")

    return run


def ensure(condition, message):
    if not condition:
        raise AssertionError(message)


# ---------------------------------------------------------------- rendering


def kustomize(kubectl, directory):
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def kustomization_dirs():
    """(directory, kind) of every kustomization under deploy/kubernetes."""
    found = []
    for path in sorted(KUBERNETES.rglob("kustomization.yaml")):
        kind = yaml.safe_load(path.read_text()).get("kind", "Kustomization")
        found.append((path.parent, kind))
    return found


def render_with_component(kubectl, variant, component):
    # kustomize wants relative paths: overlay from a directory beside the examples.
    with tempfile.TemporaryDirectory(dir=KUBERNETES / "examples") as tmp:
        Path(tmp, "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [os.path.relpath(variant, tmp)],
                    "components": [os.path.relpath(component, tmp)],
                }
            )
        )
        return kustomize(kubectl, tmp)


# --------------------------------------------------------------- validation


def strict(schema):
    """Adds additionalProperties: false to every object schema with properties."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for value in schema.values():
            strict(value)
    elif isinstance(schema, list):
        for value in schema:
            strict(value)
    return schema


_crd_validators = {}


def crd_validator(kind):
    if kind not in _crd_validators:
        from cloudcoil.models.prometheus_operator import v1

        model = {"ServiceMonitor": v1.ServiceMonitor, "PodMonitor": v1.PodMonitor}[kind]
        schema = strict(model.model_json_schema(by_alias=True))
        _crd_validators[kind] = jsonschema.Draft202012Validator(schema)
    return _crd_validators[kind]


def validate_object(obj):
    kind, api = obj.get("kind"), obj.get("apiVersion", "")
    if api.startswith("monitoring.coreos.com/"):
        ensure(api == "monitoring.coreos.com/v1", f"{kind}: unexpected apiVersion {api}")
        errors = sorted(crd_validator(kind).iter_errors(obj), key=lambda e: list(e.path))
        ensure(
            not errors,
            f"{kind}/{obj['metadata']['name']}: "
            + "; ".join(f"{'.'.join(map(str, e.path))}: {e.message[:200]}" for e in errors[:3]),
        )
        return
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        raise AssertionError(f"{kind}/{obj['metadata']['name']}: {path}: {e.message}") from None


def validate_all(objects):
    ensure(objects, "nothing rendered")
    for obj in objects:
        validate_object(obj)


# ---------------------------------------------------------------- invariants


def one(objects, kind, name=None):
    found = [
        o
        for o in objects
        if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    ensure(len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


def container(pod_spec, name, init=False):
    key = "initContainers" if init else "containers"
    found = [c for c in pod_spec.get(key, []) if c["name"] == name]
    ensure(len(found) == 1, f"expected one {key[:-1]} {name!r}")
    return found[0]


def env_value(c, name):
    values = [e.get("value") for e in c.get("env", []) if e["name"] == name]
    return values[0] if values else None


def mount(c, volume):
    mounts = [m for m in c.get("volumeMounts", []) if m["name"] == volume]
    ensure(len(mounts) == 1, f"container {c['name']} should mount volume {volume!r} once")
    return mounts[0]


def port_named(c, name):
    ports = [p for p in c.get("ports", []) if p.get("name") == name]
    return ports[0]["containerPort"] if ports else None


def selects(selector, labels):
    """Whether a Kubernetes label selector selects `labels`."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def exporter_flags(exporter):
    out = subprocess.run([exporter, "serve", "--help"], capture_output=True, text=True, check=True)
    return set(re.findall(r"(--[a-z][a-z0-9.-]*)", out.stdout)), out.stdout


def check_exporter_container(c, flags, version, sidecar):
    """`sidecar`: the exporter shares its pod with vLLM (no readiness probe,
    check_sidecar_probes); otherwise it is a pod of its own (the DaemonSet),
    ready on /-/ready."""
    image = c["image"]
    ensure(image == f"{EXPORTER_IMAGE}:{version}", f"exporter image {image!r}, expected {EXPORTER_IMAGE}:{version} (Cargo.toml)")
    for arg in c.get("args", []):
        if arg.startswith("--"):
            flag = arg.split("=", 1)[0]
            ensure(flag in flags, f"exporter argument {arg!r}: no such flag in `multiproc-exporter serve --help`")
    ensure(port_named(c, "metrics") == EXPORTER_PORT, "exporter port `metrics` should be 9089")
    sc = c.get("securityContext", {})
    ensure(sc.get("readOnlyRootFilesystem") is True, "exporter: readOnlyRootFilesystem")
    ensure(sc.get("allowPrivilegeEscalation") is False, "exporter: allowPrivilegeEscalation false")
    ensure(sc.get("capabilities", {}).get("drop") == ["ALL"], "exporter: drop ALL capabilities")
    probes = [("livenessProbe", "/-/healthy"), ("startupProbe", "/-/healthy")]
    if sidecar:
        check_sidecar_probes(c)
    else:
        probes.append(("readinessProbe", "/-/ready"))
    for probe, path in probes:
        get = c.get(probe, {}).get("httpGet", {})
        ensure(get.get("path") == path and get.get("port") in ("metrics", EXPORTER_PORT), f"exporter {probe} should GET {path} on the metrics port")
    resources = c.get("resources", {})
    for key in ("cpu", "memory"):
        ensure(key in resources.get("requests", {}) and key in resources.get("limits", {}), f"exporter: {key} request and limit")


# ------------------------------------------ a sidecar never gates readiness

# Kubernetes marks a Pod Ready only when every container is ready, native
# sidecars (init containers with restartPolicy: Always) included, and a pod
# that is not Ready leaves its Services' endpoints. A readiness probe on the
# exporter beside vLLM (/-/ready answers 503 while the metrics directory is
# missing) would let monitoring stop inference traffic, so a sidecar has none;
# its liveness and startup probes GET /-/healthy, which depends on nothing.
# The DaemonSet (a pod of its own) keeps /-/ready. docs/deployment.md,
# "Why the sidecar has no readiness probe".

HEALTHY = "/-/healthy"
# Renderings that must hold an exporter sidecar (so that the check below
# cannot pass for want of finding one).
SIDECAR_RENDERINGS = (
    "sidecar",
    "examples/sidecar-servicemonitor",
    "examples/existing-deployment",
    "sidecar + components/podmonitor",
    "sidecar + components/servicemonitor",
    "helm/production-stack post-renderer",
)


def is_exporter(c):
    """A container running multiproc-exporter: by its name or its image's."""
    image = str(c.get("image", "")).split("@", 1)[0]
    repository = image.rsplit("/", 1)[-1].split(":", 1)[0]
    return c.get("name") == "multiproc-exporter" or repository == "multiproc-exporter"


def pod_specs(node):
    """Every pod spec in `node`: any mapping with a `containers` list (a Pod,
    any workload's template, a CronJob's job template, a documentation
    fragment)."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield node
        for value in node.values():
            yield from pod_specs(value)
    elif isinstance(node, list):
        for value in node:
            yield from pod_specs(value)


def running_containers(spec):
    """The containers whose readiness makes the pod's: its containers and its
    native sidecars (init containers with restartPolicy: Always)."""
    native = [c for c in spec.get("initContainers") or [] if isinstance(c, dict) and c.get("restartPolicy") == "Always"]
    return [c for c in spec["containers"] if isinstance(c, dict)] + native


def exporter_sidecars(node):
    """(pod spec, container) of every exporter that shares its pod with
    another running container."""
    found = []
    for spec in pod_specs(node):
        running = running_containers(spec)
        found += [(spec, c) for c in running if is_exporter(c) and len(running) > 1]
    return found


def http_path(probe):
    return ((probe or {}).get("httpGet") or {}).get("path")


def check_sidecar_probes(c, fragment=False):
    """No readiness probe on an exporter beside vLLM; a liveness or startup
    probe on /-/healthy (not required of documentation fragments, which
    refer to the manifests for the probes)."""
    probe = c.get("readinessProbe")
    ensure(
        not probe,
        f"the sidecar {c.get('name')!r} has a readinessProbe ({http_path(probe) or 'not an httpGet'}): "
        "Kubernetes marks a pod Ready only when every container is, so the exporter would take vLLM "
        "out of its Service's endpoints (docs/deployment.md)",
    )
    if not fragment:
        ensure(
            any(http_path(c.get(p)) == HEALTHY for p in ("livenessProbe", "startupProbe")),
            f"the sidecar {c.get('name')!r} needs a livenessProbe or startupProbe on {HEALTHY}",
        )


def check_no_sidecar_gates_readiness(rendered):
    """Every exporter sidecar in every rendering (kustomizations, components
    combined with the variants, the production-stack post-renderer's output,
    what the docs render)."""
    missing = [n for n in SIDECAR_RENDERINGS if not exporter_sidecars(rendered.get(n, []))]
    ensure(not missing, f"no exporter sidecar found in {missing}")
    total, failures = 0, []
    for name, objects in sorted(rendered.items()):
        for _, c in exporter_sidecars(objects):
            total += 1
            try:
                check_sidecar_probes(c)
            except AssertionError as e:
                failures.append(f"{name}: {e}")
    ensure(not failures, f"{len(failures)} of {total} exporter sidecars: " + " | ".join(failures))
    print(f"      ({total} exporter sidecars in {len(rendered)} renderings, none with a readinessProbe)")


def check_doc_fragment(doc, document):
    """A YAML block of the docs: its exporter sidecars have no readiness
    probe; an exporter container shown on its own (a fragment of a pod) is
    taken for a sidecar, one alone in its pod spec is not."""
    alone = set()
    for spec in pod_specs(document):
        running = running_containers(spec)
        for c in running:
            if is_exporter(c) and len(running) == 1:
                alone.add(id(c))

    def walk(node):
        if isinstance(node, dict):
            if "image" in node and is_exporter(node) and id(node) not in alone:
                try:
                    check_sidecar_probes(node, fragment=True)
                except AssertionError as e:
                    raise AssertionError(f"{doc.name}: {e}") from None
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)


def effective_security(pod_spec, c):
    merged = dict(pod_spec.get("securityContext", {}))
    merged.update(c.get("securityContext", {}))
    return merged


def check_non_root(pod_spec, c):
    sc = effective_security(pod_spec, c)
    ensure(sc.get("runAsNonRoot") is True, "exporter: runAsNonRoot")
    ensure(sc.get("runAsUser") == EXPORTER_UID, f"exporter: runAsUser {EXPORTER_UID} (the image's user)")
    ensure(sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", "exporter: seccomp RuntimeDefault")


def check_wipe(pod_spec, volume, path):
    init = container(pod_spec, "wipe-metrics-dir", init=True)
    ensure(WIPE_COMMAND in " ".join(init.get("command", []) + init.get("args", [])), f"the init container should run {WIPE_COMMAND}")
    ensure(env_value(init, "PROMETHEUS_MULTIPROC_DIR") == path, "the init container's PROMETHEUS_MULTIPROC_DIR")
    m = mount(init, volume)
    ensure(m["mountPath"] == path and not m.get("readOnly"), "the init container mounts the directory read-write at the same path")
    return init


def check_vllm(pod_spec):
    vllm = container(pod_spec, "vllm")
    image = vllm["image"]
    ensure(re.fullmatch(r"vllm/vllm-openai:v\d+\.\d+\.\d+", image), f"vLLM image should be pinned: {image}")
    ensure("nvidia.com/gpu" in vllm.get("resources", {}).get("limits", {}), "vLLM should request a GPU")
    path = env_value(vllm, "PROMETHEUS_MULTIPROC_DIR")
    ensure(path, "PROMETHEUS_MULTIPROC_DIR must be set in vLLM's container environment")
    volumes = [m for m in vllm.get("volumeMounts", []) if m["mountPath"] == path]
    ensure(len(volumes) == 1, f"vLLM should mount a volume at {path}")
    ensure(not volumes[0].get("readOnly"), "vLLM's mount must be writable")
    return vllm, path, volumes[0]


def check_sidecar(objects, flags, version):
    deployment = one(objects, "Deployment", "vllm")
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    vllm, path, vllm_mount = check_vllm(spec)
    volume = vllm_mount["name"]
    ensure(next(v for v in spec["volumes"] if v["name"] == volume).get("emptyDir") is not None, "the shared volume is an emptyDir")
    exporter = container(spec, "multiproc-exporter")
    check_exporter_container(exporter, flags, version, sidecar=True)
    check_non_root(spec, exporter)
    m = mount(exporter, volume)
    ensure(m["mountPath"] == path, f"the exporter mounts the shared volume at vLLM's path {path}")
    ensure(m.get("readOnly") is True, "the exporter's mount must be read-only")
    dirs = [a.split("=", 1)[1] for a in exporter.get("args", []) if a.startswith("--dir=")]
    ensure(env_value(exporter, "PROMETHEUS_MULTIPROC_DIR") == path or dirs == [path], "the exporter reads vLLM's directory")
    check_wipe(spec, volume, path)
    annotations = pod["metadata"].get("annotations", {})
    check_container_order(pod)
    ensure(annotations.get("prometheus.io/scrape") == "true", "pod annotation prometheus.io/scrape")
    ensure(annotations.get("prometheus.io/port") == str(EXPORTER_PORT), "pod annotation prometheus.io/port matches the exporter port")
    ensure(port_named(vllm, "metrics") is None, "only the exporter's port is named `metrics`")
    service = one(objects, "Service", "vllm-metrics")
    check_service(service, pod["metadata"]["labels"], exporter)


def check_container_order(pod):
    """vLLM is the pod's first container and its default one, so that
    `kubectl logs`/`exec` without -c land in vLLM, not in the shell-less exporter."""
    names = [c["name"] for c in pod["spec"]["containers"]]
    ensure(names[0] == "vllm", f"vLLM must be the first container, not {names}")
    annotations = pod["metadata"].get("annotations", {})
    ensure(annotations.get("kubectl.kubernetes.io/default-container") == "vllm", "pod annotation kubectl.kubernetes.io/default-container: vllm")


def check_added_sidecar(deployment, flags, version):
    """The invariants of components/sidecar applied to any Deployment."""
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    check_container_order(pod)
    vllm, path, vllm_mount = check_vllm_directory(spec)
    exporter = container(spec, "multiproc-exporter")
    ensure(spec["containers"][-1] is exporter, "the exporter is appended after vLLM's container")
    check_exporter_container(exporter, flags, version, sidecar=True)
    check_non_root(spec, exporter)
    m = mount(exporter, vllm_mount["name"])
    ensure(m["mountPath"] == path and m.get("readOnly") is True, "the exporter mounts vLLM's directory read-only at the same path")
    ensure(env_value(exporter, "PROMETHEUS_MULTIPROC_DIR") == path, "the exporter reads vLLM's directory")
    volume = next(v for v in spec["volumes"] if v["name"] == vllm_mount["name"])
    ensure(volume.get("emptyDir") is not None, "the shared volume is an emptyDir")
    ensure(pod["metadata"]["annotations"].get("prometheus.io/port") == str(EXPORTER_PORT), "prometheus.io/port annotation")
    ensure(spec.get("shareProcessNamespace") is True, "the pod shares its pid namespace, so the exporter sees vLLM's processes")
    ensure("--writers.liveness=proc" in exporter.get("args", []), "the exporter trusts /proc for writer liveness (vLLM's open files are another user's)")


def check_existing_deployment(objects, flags, version):
    check_added_sidecar(one(objects, "Deployment", "my-vllm"), flags, version)


def check_production_stack(kubectl, flags, version, rendered):
    """The post-renderer on (a hand-written copy of) the chart's output: the
    engine gets the sidecar, the router stays byte for byte what it was."""
    fixture = ROOT / "tests" / "deploy" / "production-stack-rendered.yaml"
    out = subprocess.run(
        [str(PRODUCTION_STACK / "post-renderer.sh")],
        input=fixture.read_text(), capture_output=True, text=True,
        env={**os.environ, "KUBECTL": kubectl, "MULTIPROC_EXPORTER_IMAGE": f"{EXPORTER_IMAGE}:{version}"},
    )
    ensure(out.returncode == 0, f"post-renderer failed: {out.stderr.strip()}")
    objects = [d for d in yaml.safe_load_all(out.stdout) if d]
    validate_all(objects)
    rendered["helm/production-stack post-renderer"] = objects
    before = {d["metadata"]["name"]: d for d in yaml.safe_load_all(fixture.read_text()) if d}
    engine = one(objects, "Deployment", "vllm-llama3-deployment-vllm")
    check_added_sidecar(engine, flags, version)
    vllm = container(engine["spec"]["template"]["spec"], "vllm")
    ensure(env_value(vllm, "PROMETHEUS_MULTIPROC_DIR") == "/var/run/vllm-metrics", "the chart's /tmp default is replaced by the shared directory")
    router = one(objects, "Deployment", "vllm-deployment-router")
    ensure(router == before["vllm-deployment-router"], "the router Deployment is left as the chart rendered it")
    ensure(not list(PRODUCTION_STACK.glob(".render.*")), "the post-renderer removes its work directory")
    values = yaml.safe_load((PRODUCTION_STACK / "example-values.yaml").read_text())
    ensure(values["servingEngineSpec"]["modelSpec"][0]["annotations"] == engine["metadata"]["annotations"], "example-values.yaml annotates the engine as the fixture does")


def check_vllm_directory(spec):
    """vLLM's container writes to a mounted, writable PROMETHEUS_MULTIPROC_DIR."""
    vllm = container(spec, "vllm")
    path = env_value(vllm, "PROMETHEUS_MULTIPROC_DIR")
    ensure(path, "PROMETHEUS_MULTIPROC_DIR must be set in vLLM's container environment")
    volumes = [m for m in vllm.get("volumeMounts", []) if m["mountPath"] == path]
    ensure(len(volumes) == 1 and not volumes[0].get("readOnly"), f"vLLM should mount a writable volume at {path}")
    return vllm, path, volumes[0]


def check_service(service, pod_labels, exporter):
    ensure(selects({"matchLabels": service["spec"]["selector"]}, pod_labels), f"Service {service['metadata']['name']} selects the exporter's pods")
    ports = [p for p in service["spec"]["ports"] if p["name"] == "metrics"]
    ensure(len(ports) == 1, "the Service has a port named `metrics`")
    target = ports[0].get("targetPort", ports[0]["port"])
    ensure(target == "metrics" or target == port_named(exporter, "metrics"), "the Service's targetPort is the exporter's port")


def check_daemonset(objects, flags, version):
    deployment = one(objects, "Deployment", "vllm")
    spec = deployment["spec"]["template"]["spec"]
    vllm, path, vllm_mount = check_vllm(spec)
    volume = next(v for v in spec["volumes"] if v["name"] == vllm_mount["name"])
    ensure("emptyDir" not in volume, "the vLLM volume is a hostPath, not an emptyDir")
    host = volume.get("hostPath", {})
    ensure(host.get("type") == "DirectoryOrCreate", "hostPath type DirectoryOrCreate")
    sub = "$(POD_NAMESPACE)_$(POD_NAME)"
    init = check_wipe(spec, volume["name"], path)
    for c in (vllm, init):
        ensure(mount(c, volume["name"]).get("subPathExpr") == sub, f"{c['name']} mounts its own subdirectory {sub}")
        refs = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c.get("env", [])}
        ensure(refs.get("POD_NAMESPACE") == "metadata.namespace" and refs.get("POD_NAME") == "metadata.name", f"{c['name']} defines POD_NAMESPACE and POD_NAME")
    ensure(all(port_named(c, "metrics") is None for c in spec["containers"]), "vLLM pods have no `metrics` port in the DaemonSet variant")
    pre_stop = vllm.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    ensure(WIPE_COMMAND in " ".join(pre_stop), "vLLM empties its own hostPath directory when it stops")

    daemonset = one(objects, "DaemonSet", "multiproc-exporter")
    pod = daemonset["spec"]["template"]
    ds_spec = pod["spec"]
    exporter = container(ds_spec, "multiproc-exporter")
    check_exporter_container(exporter, flags, version, sidecar=False)
    check_non_root(ds_spec, exporter)
    ds_volume = next(v for v in ds_spec["volumes"] if v.get("hostPath", {}).get("path") == host["path"])
    m = mount(exporter, ds_volume["name"])
    ensure(m.get("readOnly") is True, "the DaemonSet's hostPath mount must be read-only")
    ensure("subPath" not in m and "subPathExpr" not in m, "the DaemonSet mounts the parent directory")
    args = exporter.get("args", [])
    ensure(f"--dir={m['mountPath']}" in args, "the DaemonSet reads the mounted parent with --dir")
    ensure("--dir.subdirectories-label=vllm_pod" in args, "the DaemonSet serves subdirectories with --dir.subdirectories-label=vllm_pod")
    annotations = pod["metadata"].get("annotations", {})
    ensure(annotations.get("prometheus.io/scrape") == "true" and annotations.get("prometheus.io/port") == str(EXPORTER_PORT), "DaemonSet pod annotations")
    check_service(one(objects, "Service", "multiproc-exporter"), pod["metadata"]["labels"], exporter)


def exporter_pods(objects):
    """Pod templates that have a container port named `metrics`."""
    pods = []
    for o in objects:
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
            pod = o["spec"]["template"]
            if any(port_named(c, "metrics") for c in pod["spec"]["containers"]):
                pods.append(pod)
    return pods


def check_monitors(objects):
    services = [o for o in objects if o["kind"] == "Service"]
    for monitor in [o for o in objects if o["kind"] == "ServiceMonitor"]:
        selected = [s for s in services if selects(monitor["spec"]["selector"], s["metadata"].get("labels", {}))]
        ensure(len(selected) == 1, f"ServiceMonitor selects exactly the exporter Service, got {[s['metadata']['name'] for s in selected]}")
        port_names = {p["name"] for p in selected[0]["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            ensure(endpoint["port"] in port_names, f"ServiceMonitor port {endpoint['port']} is a port of the Service")
            ensure(endpoint.get("path", "/metrics") == "/metrics", "metrics path")
    for monitor in [o for o in objects if o["kind"] == "PodMonitor"]:
        pods = [
            o["spec"]["template"]
            for o in objects
            if o["kind"] in ("Deployment", "DaemonSet")
            and selects(monitor["spec"]["selector"], o["spec"]["template"]["metadata"]["labels"])
        ]
        targets = [p for p in pods for c in p["spec"]["containers"] for e in monitor["spec"]["podMetricsEndpoints"] if port_named(c, e["port"])]
        ensure(len(targets) == 1, f"PodMonitor has exactly one target pod template (the exporter's), got {len(targets)}")


# ---------------------------------------------------------------- node agent

# The node agent (deploy/kubernetes/node-agent) finds the multiprocess
# directories through /proc (--discover.processes) and reads them through
# /proc/<pid>/root: it needs the node's pid namespace, two capabilities and
# the kubelet's log tree, and nothing of vLLM's pods. It runs as uid 0 with
# every other capability dropped (a non-root process gets no capability from
# the container's securityContext: Kubernetes sets no ambient capabilities).
# docs/deployment.md, "Node agent".

NODE_AGENT_RENDERINGS = ("node-agent", "node-agent/podmonitor")
NODE_AGENT_DAEMONSET = "multiproc-exporter-node-agent"
NODE_AGENT_CAPABILITIES = {"SYS_PTRACE", "DAC_READ_SEARCH"}
POD_LOG_DIR = "/var/log/pods"  # --discover.pod-log-dir's default, the kubelet's
# The only host paths the node agent may mount (read-only, at the same path):
# the kubelet's pod log tree and its container links beside it (names only).
NODE_AGENT_HOST_PATHS = {POD_LOG_DIR, "/var/log/containers"}
RBAC_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ServiceAccount"}


def flag_value(args, flag):
    """The value of `--flag=value` or `--flag value` in `args`, else None."""
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(args) and not args[i + 1].startswith("--"):
            return args[i + 1]
    return None


def check_node_agent(objects, flags, version, monitored):
    """`monitored`: the rendering must hold a PodMonitor or ServiceMonitor."""
    namespace = one(objects, "Namespace")
    ns = namespace["metadata"]["name"]
    labels = namespace["metadata"].get("labels", {})
    ensure(labels.get("pod-security.kubernetes.io/enforce") == "privileged", f"Namespace {ns}: Pod Security level privileged (hostPID, SYS_PTRACE, hostPath)")
    for o in objects:
        if o["kind"] != "Namespace":
            ensure(o["metadata"].get("namespace") == ns, f"{o['kind']}/{o['metadata']['name']} is in the node agent's namespace {ns}")
    workloads = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Pod", "Job", "CronJob")]
    ensure([(o["kind"], o["metadata"]["name"]) for o in workloads] == [("DaemonSet", NODE_AGENT_DAEMONSET)], f"the only workload is the DaemonSet (vLLM's pods are not changed, nor put in the privileged namespace): {[o['metadata']['name'] for o in workloads]}")
    rbac = sorted(o["kind"] for o in objects if o["kind"] in RBAC_KINDS)
    ensure(not rbac, f"no RBAC objects: the node agent needs no API access ({rbac})")

    daemonset = one(objects, "DaemonSet", NODE_AGENT_DAEMONSET)
    pod = daemonset["spec"]["template"]
    spec = pod["spec"]
    ensure(spec.get("hostPID") is True, "hostPID: true (discovery lists every process's /proc/<pid>/fd)")
    ensure(not spec.get("hostNetwork") and not spec.get("hostIPC"), "no hostNetwork, no hostIPC")
    ensure(spec.get("automountServiceAccountToken") is False, "automountServiceAccountToken: false (no API access)")
    ensure(not spec.get("initContainers") and [c["name"] for c in spec["containers"]] == ["multiproc-exporter"], "the exporter is the pod's only container")
    exporter = container(spec, "multiproc-exporter")
    check_exporter_container(exporter, flags, version, sidecar=False)

    # The exact capability set: ALL dropped, SYS_PTRACE and DAC_READ_SEARCH
    # added, nothing else, not privileged.
    sc = exporter.get("securityContext", {})
    capabilities = sc.get("capabilities", {})
    ensure(capabilities.get("drop") == ["ALL"], f"drop: [ALL], got {capabilities.get('drop')}")
    added = capabilities.get("add") or []
    ensure(
        len(added) == len(set(added)) and set(added) == NODE_AGENT_CAPABILITIES,
        f"capabilities added: exactly {sorted(NODE_AGENT_CAPABILITIES)}, got {added}",
    )
    ensure(sc.get("privileged") is not True, "not privileged")
    effective = effective_security(spec, exporter)
    ensure(effective.get("runAsUser") == 0 and effective.get("runAsNonRoot") is False, "runs as uid 0 (added capabilities reach no non-root process: Kubernetes sets no ambient capabilities), runAsNonRoot: false said explicitly")
    ensure(effective.get("seccompProfile", {}).get("type") == "RuntimeDefault", "seccomp RuntimeDefault")

    # Host paths: the kubelet's log tree only, read-only, at the same paths;
    # nothing reaches vLLM's volumes (/var/lib/kubelet, /var/lib/vllm-metrics).
    host_volumes = {v["name"]: v["hostPath"]["path"].rstrip("/") for v in spec.get("volumes", []) if "hostPath" in v}
    ensure(POD_LOG_DIR in host_volumes.values(), f"{POD_LOG_DIR} is mounted from the node")
    others = sorted(set(host_volumes.values()) - NODE_AGENT_HOST_PATHS)
    ensure(not others, f"no hostPath but {sorted(NODE_AGENT_HOST_PATHS)}: {others}")
    kinds = sorted({k for v in spec.get("volumes", []) for k in v if k != "name"})
    ensure(kinds == ["hostPath"], f"no volumes but the hostPaths: {kinds}")
    for name, path in host_volumes.items():
        m = mount(exporter, name)
        ensure(m.get("readOnly") is True, f"hostPath {path} is mounted read-only")
        ensure(m["mountPath"].rstrip("/") == path and "subPath" not in m and "subPathExpr" not in m, f"hostPath {path} is mounted at {path}")
        ensure(m.get("mountPropagation", "None") == "None", f"hostPath {path}: no mount propagation")

    args = exporter.get("args", [])
    ensure("--discover.processes" in args, "--discover.processes in the exporter's args")
    log_dir = flag_value(args, "--discover.pod-log-dir") or POD_LOG_DIR
    ensure(any(mount(exporter, n)["mountPath"].rstrip("/") == log_dir.rstrip("/") for n in host_volumes), f"--discover.pod-log-dir {log_dir} is the mounted {POD_LOG_DIR}")
    ensure(not [a for a in args if a == "--dir" or a.startswith("--dir=")] and env_value(exporter, "PROMETHEUS_MULTIPROC_DIR") is None, "no --dir or PROMETHEUS_MULTIPROC_DIR: the directories are discovered")

    # Scraped only with honor_labels: not through the prometheus.io/*
    # annotations that deploy/prometheus.yml's job (without it) follows.
    annotations = pod["metadata"].get("annotations", {})
    ensure(annotations.get("prometheus.io/scrape") != "true", "no prometheus.io/scrape annotation: deploy/prometheus.yml's job does not honour the exporter's namespace/pod/container labels")
    check_service(one(objects, "Service", NODE_AGENT_DAEMONSET), pod["metadata"]["labels"], exporter)

    monitors = [o for o in objects if o["kind"] in ("PodMonitor", "ServiceMonitor")]
    ensure(bool(monitors) == monitored, f"{'a' if monitored else 'no'} PodMonitor or ServiceMonitor expected, got {len(monitors)}")
    for monitor in monitors:
        endpoints = monitor["spec"].get("podMetricsEndpoints") or monitor["spec"].get("endpoints") or []
        ensure(endpoints, f"{monitor['kind']} has endpoints")
        for e in endpoints:
            ensure(e.get("honorLabels") is True, f"{monitor['kind']}/{monitor['metadata']['name']} endpoint {e.get('port')}: honorLabels: true (keeps the vLLM pods' namespace, pod and container labels)")
            ensure(not any(r.get("targetLabel") in ("namespace", "pod", "container") for r in e.get("metricRelabelings", [])), "no metric relabelling of namespace, pod or container")
    check_monitors(objects)


def meta_label(name):
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)


def check_node_agent_prometheus_job(promtool, objects):
    """The docs' plain-Prometheus job for the node agent: honour_labels, the
    node agent's pods (and only they) kept, the `metrics` port; promtool
    accepts it (discovery replaced by a static target)."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    jobs = []
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        for d in yaml.safe_load_all(block):
            if isinstance(d, dict):
                jobs += [j for j in d.get("scrape_configs", []) if j.get("job_name") == "multiproc-exporter-node-agent"]
    ensure(len(jobs) == 1, f"docs/deployment.md has one scrape job multiproc-exporter-node-agent, found {len(jobs)}")
    job = jobs[0]
    ensure(job.get("honor_labels") is True, "the node agent's job has honor_labels: true")
    sd = job["kubernetes_sd_configs"]
    ensure(len(sd) == 1 and sd[0]["role"] == "pod" and set(sd[0]) <= KUBERNETES_SD_FIELDS, "pod discovery")
    pod = one(objects, "DaemonSet", NODE_AGENT_DAEMONSET)["spec"]["template"]
    pod_labels = {meta_label(k): v for k, v in pod["metadata"]["labels"].items()}
    namespace = one(objects, "Namespace")["metadata"]["name"]
    names = (sd[0].get("namespaces") or {}).get("names")
    ensure(names is None or namespace in names, f"discovers pods in {namespace}")
    facts = {**pod_labels, "__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_container_port_name": "metrics"}
    keeps = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    ensure(any(r["source_labels"] == ["__meta_kubernetes_pod_container_port_name"] and r["regex"] == "metrics" for r in keeps), "keeps the `metrics` port")
    ensure(any(r["source_labels"][0].startswith("__meta_kubernetes_pod_label_") for r in keeps), "keeps pods by the node agent's labels")
    for r in job["relabel_configs"]:
        for label in r.get("source_labels", []):
            if label.startswith("__meta_"):
                ensure(POD_META.fullmatch(label), f"{label} is not a meta label of role: pod")
    for r in keeps:
        value = ";".join(facts.get(l, "") for l in r["source_labels"])
        ensure(re.fullmatch(r["regex"], value), f"keep rule {r['source_labels']} =~ {r['regex']} drops the node agent's pods ({value!r})")
    # vLLM's pods (the sidecar's labels) and the DaemonSet's are not kept.
    other = {meta_label("app.kubernetes.io/name"): "multiproc-exporter", "__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_container_port_name": "metrics"}
    ensure(not all(re.fullmatch(r["regex"], ";".join(other.get(l, "") for l in r["source_labels"])) for r in keeps), "the job keeps only the node agent's pods (not the DaemonSet's or the sidecars')")
    static = {"global": {"scrape_interval": "15s"}, "scrape_configs": [copy.deepcopy(job)]}
    del static["scrape_configs"][0]["kubernetes_sd_configs"]
    static["scrape_configs"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{EXPORTER_PORT}"]}]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "prometheus.yml")
        path.write_text(yaml.safe_dump(static, sort_keys=False))
        out = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
        ensure(out.returncode == 0, f"promtool check config: {out.stdout}{out.stderr}")


# ------------------------------------------------------------ prometheus.yml

# Fields of kubernetes_sd_configs and the meta labels of `role: pod`, as the
# Prometheus documentation (configuration.md, <kubernetes_sd_config>) lists them.
KUBERNETES_SD_FIELDS = {
    "api_server", "role", "namespaces", "selectors", "attach_metadata", "kubeconfig_file",
    "basic_auth", "authorization", "oauth2", "proxy_url", "no_proxy", "proxy_from_environment",
    "proxy_connect_header", "follow_redirects", "enable_http2", "tls_config",
}
POD_META = re.compile(
    r"__meta_kubernetes_(namespace|pod_(name|ip|label_\w+|labelpresent_\w+|annotation_\w+|"
    r"annotationpresent_\w+|container_(init|name|id|image|port_name|port_number|port_protocol)|"
    r"ready|phase|node_name|host_ip|uid|controller_kind|controller_name))"
)


def annotation_meta(annotation):
    return "__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9_]", "_", annotation)


def check_prometheus_yml(promtool, rendered):
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    jobs = config["scrape_configs"]
    ensure([j["job_name"] for j in jobs] == ["multiproc-exporter"], "one job, multiproc-exporter")
    job = jobs[0]
    sd = job["kubernetes_sd_configs"]
    ensure(len(sd) == 1 and sd[0]["role"] == "pod", "pod discovery")
    ensure(set(sd[0]) <= KUBERNETES_SD_FIELDS, f"unknown kubernetes_sd_configs fields: {set(sd[0]) - KUBERNETES_SD_FIELDS}")
    for rule in job["relabel_configs"]:
        for label in rule.get("source_labels", []):
            if label.startswith("__meta_"):
                ensure(POD_META.fullmatch(label), f"{label} is not a meta label of role: pod")
    # The relabelling keeps pods by the annotation and port the manifests set.
    keep = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    ensure(keep.get((annotation_meta("prometheus.io/scrape"),)) == "true", "keeps pods annotated prometheus.io/scrape=true")
    ensure(keep.get(("__meta_kubernetes_pod_container_port_name",)) == "metrics", "keeps the `metrics` container port")
    for objects in rendered:
        for pod in exporter_pods(objects):
            ensure(pod["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true", "every exporter pod is annotated for discovery")
    # promtool, with the discovery it cannot parse replaced by a static target.
    static = copy.deepcopy(config)
    del static["scrape_configs"][0]["kubernetes_sd_configs"]
    static["scrape_configs"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{EXPORTER_PORT}"]}]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "prometheus.yml")
        path.write_text(yaml.safe_dump(static, sort_keys=False))
        out = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
        ensure(out.returncode == 0, f"promtool check config: {out.stdout}{out.stderr}")


# ---------------------------------------------------------------- Dockerfile


def dockerfile_instructions(text):
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, _, rest = current.partition(" ")
        lines.append((keyword.upper(), rest.strip()))
        current = ""
    return lines


def dockerignore_includes(patterns, path):
    """Whether `path` (relative, '/'-separated) is in the build context."""
    included = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        p = pattern[1:] if negate else pattern
        p = p.rstrip("/")
        parts = path.split("/")
        hit = any(fnmatch.fnmatchcase("/".join(parts[: i + 1]), p) for i in range(len(parts)))
        if hit:
            included = negate
    return included


def check_dockerfile(hadolint, help_text, cargo_check):
    dockerfile = ROOT / "deploy" / "Dockerfile"
    out = subprocess.run([hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True)
    ensure(out.returncode == 0, f"hadolint: {out.stdout}{out.stderr}")
    instructions = dockerfile_instructions(dockerfile.read_text())
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    binary = cargo["bin"][0]["name"]
    # The base images are global build arguments (scripts/test-image builds
    # from locally made bases): check their defaults, the public images.
    first_from = next(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    defaults = {}
    for kw, rest in instructions[:first_from]:
        if kw == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            defaults[name] = re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m.group(1), m.group(0)), value)
    raw_froms = [rest for kw, rest in instructions if kw == "FROM"]
    # The build stage runs on the build machine's platform and cross-compiles (multi-arch, docs/platforms.md).
    ensure(raw_froms[0].startswith("--platform=$BUILDPLATFORM ${BUILD_IMAGE} ") and raw_froms[-1] == "${RUNTIME_IMAGE}", f"base images are the build arguments BUILD_IMAGE (on $BUILDPLATFORM) and RUNTIME_IMAGE: {raw_froms}")
    froms = [re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m.group(1), m.group(0)), rest) for rest in raw_froms]
    ensure(len(froms) >= 2, "a multi-stage build")
    ensure(froms[-1].startswith("gcr.io/distroless/") and froms[-1].endswith(":nonroot"), "the final stage is distroless :nonroot")
    ensure(re.search(r"bookworm", froms[0]), "the build stage is Debian bookworm (the runtime's glibc)")
    args = dict(rest.split("=", 1) for kw, rest in instructions if kw == "ARG" and "=" in rest)
    want = tuple(int(x) for x in cargo["package"]["rust-version"].split("."))
    have = tuple(int(x) for x in args["RUST_VERSION"].split("."))
    ensure(have >= want[: len(have)], f"RUST_VERSION {args['RUST_VERSION']} below rust-version {cargo['package']['rust-version']}")
    runs = " ".join(rest for kw, rest in instructions if kw == "RUN")
    ensure(f"--bin {binary}" in runs and "--locked" in runs and '--target "$triple"' in runs and f'target/$triple/$profile_dir/{binary}' in runs, "builds the binary named in Cargo.toml, for the target platform")
    # In the release profile unless asked otherwise (CI proves the stage in `dev`: scripts/test-image build-stage).
    ensure(args.get("CARGO_PROFILE") == "release" and '--profile "${CARGO_PROFILE}"' in runs, "builds in the release profile by default (ARG CARGO_PROFILE=release)")
    final = instructions[max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM") :]
    entry = [rest for kw, rest in final if kw == "ENTRYPOINT"]
    ensure(entry == [f'["/{binary}"]'], f"ENTRYPOINT is the binary: {entry}")
    # The binary comes from the build stage, or from an image of a binary built already (BINARY_FROM, default `build`).
    ensure(defaults.get("BINARY_FROM") == "build" and ("FROM", "${BINARY_FROM} AS binary") in instructions, "the binary stage is the build stage by default")
    ensure(any(kw == "COPY" and rest.startswith("--from=binary ") and rest.endswith(f" /{binary}") for kw, rest in final), "copies the binary from the build stage")
    ensure([rest for kw, rest in final if kw == "USER"] == [f"{EXPORTER_UID}:{EXPORTER_UID}"], "runs as uid/gid 65532")
    expose = [rest for kw, rest in final if kw == "EXPOSE"]
    default = re.search(r"--web.listen-address <ADDRESS>.*?Default: `:(\d+)` for `serve`", re.sub(r"\s+", " ", help_text), re.S)
    ensure(default and expose == [default.group(1)] == [str(EXPORTER_PORT)], f"EXPOSE {expose} is the default listen port")
    # The build context, as .dockerignore leaves it, holds every COPY source.
    patterns = [l.strip() for l in (ROOT / ".dockerignore").read_text().splitlines() if l.strip() and not l.startswith("#")]
    sources = []
    for kw, rest in instructions:
        if kw == "COPY" and not rest.startswith("--from"):
            sources += rest.split()[:-1]
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        for path in sorted(p for p in ROOT.rglob("*") if p.is_file() and "target" not in p.relative_to(ROOT).parts[:1] and ".git" not in p.relative_to(ROOT).parts[:1]):
            relative = path.relative_to(ROOT).as_posix()
            if dockerignore_includes(patterns, relative):
                (context / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, context / relative)
        for source in sources:
            ensure((context / source).exists(), f"COPY {source}: not in the build context after .dockerignore")
        ensure(not (context / "target").exists() and not (context / "tests").exists(), ".dockerignore keeps target/ and tests/ out")
        if cargo_check:
            env = dict(os.environ, CARGO_TARGET_DIR=str(ROOT / "target"))
            out = subprocess.run(
                ["cargo", "check", "--offline", "--locked", "--quiet", "--bin", binary],
                cwd=context, capture_output=True, text=True, env=env,
            )
            ensure(out.returncode == 0, f"cargo check in the build context: {out.stderr[-2000:]}")


# ----------------------------------------------------------------------- docs


def slug(heading):
    """The anchor GitHub makes of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", text, re.M)}


def check_links(doc, text):
    """Relative links point at files that exist, and anchors at headings."""
    for match in re.finditer(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
        target = match.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        ensure(path.exists(), f"{doc.name}: broken link {target}")
        if anchor and path.suffix == ".md":
            ensure(anchor in anchors(path), f"{doc.name}: no heading for #{anchor} in {path.name}")


def check_docs(kubectl, rendered):
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    paths, blocks = set(), 0
    for doc in docs:
        text = doc.read_text()
        check_links(doc, text)
        for match in re.finditer(r"kubectl (?:apply -k|kustomize) ([\w./-]+)", text):
            paths.add(match.group(1).rstrip("."))
        for match in re.finditer(r"```yaml\n(.*?)```", text, re.S):
            blocks += 1
            try:
                documents = [d for d in yaml.safe_load_all(match.group(1)) if d]
            except yaml.YAMLError as e:
                raise AssertionError(f"{doc.name}: a YAML block does not parse: {e}") from None
            for d in documents:
                check_doc_fragment(doc, d)
                if isinstance(d, dict) and d.get("kind") == "Kustomization":
                    with tempfile.TemporaryDirectory(dir=KUBERNETES / "examples") as tmp:
                        Path(tmp, "kustomization.yaml").write_text(match.group(1))
                        objects = kustomize(kubectl, tmp)
                        validate_all(objects)
                        rendered[f"docs: {doc.name}, YAML block {blocks}"] = objects
                elif isinstance(d, dict) and "apiVersion" in d and "kind" in d and "metadata" in d:
                    validate_object(d)
    for path in sorted(paths):
        objects = kustomize(kubectl, ROOT / path)
        validate_all(objects)
        rendered[f"docs: {path}"] = objects
    ensure(paths, "the docs show how to apply the manifests")
    print(f"      ({len(paths)} kustomize paths, {blocks} YAML blocks in the docs)")


# ----------------------------------------------------------------------- main


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubectl", required=True)
    parser.add_argument("--hadolint", required=True)
    parser.add_argument("--promtool", required=True)
    parser.add_argument("--exporter", required=True, help="the multiproc-exporter binary")
    parser.add_argument("--cargo-check", action="store_true", help="cargo check the Docker build context")
    args = parser.parse_args()

    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    version = cargo["package"]["version"]
    if isinstance(version, dict):  # version.workspace = true: [workspace.package]
        version = cargo["workspace"]["package"]["version"]
    flags, help_text = exporter_flags(args.exporter)
    rendered = {}

    def render(directory, kind):
        objects = kustomize(args.kubectl, directory)
        validate_all(objects)
        rendered[directory.relative_to(KUBERNETES).as_posix()] = objects
        kinds = sorted(o["kind"] for o in objects)
        print(f"      {directory.relative_to(ROOT)}: {len(objects)} objects {kinds}")

    variants = {}
    for directory, kind in kustomization_dirs():
        name = directory.relative_to(KUBERNETES).as_posix()
        if kind == "Component":
            continue
        check(f"render and validate {name}")(render, directory, kind)
    for directory, kind in kustomization_dirs():
        if kind != "Component" or directory == SIDECAR_COMPONENT:
            continue
        for variant in ("sidecar", "daemonset"):
            name = f"{variant} + {directory.relative_to(KUBERNETES).as_posix()}"

            def render_combined(directory=directory, variant=variant, name=name):
                objects = render_with_component(args.kubectl, KUBERNETES / variant, directory)
                validate_all(objects)
                check_monitors(objects)
                rendered[name] = objects
                print(f"      {name}: {len(objects)} objects")

            check(f"render, validate and match monitors: {name}")(render_combined)
    for name in ("sidecar", "examples/sidecar-servicemonitor"):
        check(f"sidecar invariants: {name}")(lambda n=name: check_sidecar(rendered[n], flags, version))
    for name in ("daemonset", "examples/daemonset-podmonitor"):
        check(f"daemonset invariants: {name}")(lambda n=name: check_daemonset(rendered[n], flags, version))
    check("sidecar added to an existing Deployment: examples/existing-deployment")(
        lambda: check_existing_deployment(rendered["examples/existing-deployment"], flags, version)
    )
    check("production-stack post-renderer")(check_production_stack, args.kubectl, flags, version, rendered)
    for name in ("examples/sidecar-servicemonitor", "examples/daemonset-podmonitor"):
        check(f"monitors match: {name}")(lambda n=name: check_monitors(rendered[n]))
    for name in NODE_AGENT_RENDERINGS:
        check(f"node agent invariants: {name}")(
            lambda n=name: check_node_agent(rendered[n], flags, version, monitored=n.endswith("monitor"))
        )
    check("node agent: the docs' Prometheus job (honor_labels)")(
        lambda: check_node_agent_prometheus_job(args.promtool, rendered["node-agent"])
    )
    check("deploy/prometheus.yml")(check_prometheus_yml, args.promtool, [rendered.get("sidecar", []), rendered.get("daemonset", [])])
    check("deploy/Dockerfile")(check_dockerfile, args.hadolint, help_text, args.cargo_check)
    check("documentation examples")(check_docs, args.kubectl, rendered)
    check("no sidecar gates vLLM's readiness (no readinessProbe; liveness or startup on /-/healthy)")(check_no_sidecar_gates_readiness, rendered)

    failed = sum(1 for _, e in results if e is not None)
    print(f"deploy: {len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
