#!/bin/sh
# A Helm post-renderer that adds multiproc-exporter as a sidecar to the vLLM
# engines of vllm-project/production-stack's chart (which has no
# extraContainers value). Helm pipes the rendered chart in; this appends the
# exporter to every Deployment annotated multiproc-exporter.io/sidecar=true
# (set it per model: servingEngineSpec.modelSpec[].annotations) with
# deploy/kubernetes/components/sidecar, and prints the result:
#
#   helm install vllm vllm/vllm-stack -f values.yaml \
#     --post-renderer deploy/helm/production-stack/post-renderer.sh
#
# Environment: MULTIPROC_EXPORTER_IMAGE (default
# registry.example.com/multiproc-exporter:0.1.0, your registry's copy of the
# image built from deploy/Dockerfile) and KUBECTL (default kubectl; the
# standalone `kustomize build` works the same with KUBECTL="kustomize" and
# KUSTOMIZE_COMMAND=build). docs/deployment.md explains it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
image=${MULTIPROC_EXPORTER_IMAGE:-registry.example.com/multiproc-exporter:0.1.0}
work=$(mktemp -d "$here/.render.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat > "$work/chart.yaml"
cat > "$work/kustomization.yaml" <<KUSTOMIZATION
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - chart.yaml
components:
  - ../../../kubernetes/components/sidecar
images:
  - name: multiproc-exporter
    newName: ${image%:*}
    newTag: ${image##*:}
KUSTOMIZATION
"${KUBECTL:-kubectl}" "${KUSTOMIZE_COMMAND:-kustomize}" "$work"
