{{/* What values.schema.json cannot say (one value against another), checked once for every
template. */}}
{{- define "celgate.check" -}}
{{- if and .Values.monitoring.podMonitor.enabled .Values.monitoring.serviceMonitor.enabled }}
{{- fail "monitoring: enable podMonitor or serviceMonitor, not both (each replica would be scraped twice)" }}
{{- end }}
{{- if and .Values.authentication.clientCA.secretName .Values.authentication.clientCA.configMapName }}
{{- fail "authentication.clientCA: set secretName or configMapName, not both" }}
{{- end }}
{{- $excluded := list "kube-system" }}
{{- if not (kindIs "invalid" .Values.excludedNamespaces) }}
{{- $excluded = .Values.excludedNamespaces }}
{{- end }}
{{- if or (has .Values.test.namespace $excluded) (eq .Values.test.namespace .Release.Namespace) }}
{{- fail (printf "test.namespace is %q, which celgate's webhooks exclude (its own namespace and excludedNamespaces): name another for helm test's dry runs" .Values.test.namespace) }}
{{- end }}
{{- if and .Values.hostNetwork .Values.namespace.create }}
{{- fail "hostNetwork: the namespace namespace.create makes enforces the restricted Pod Security Standard, which refuses host networking; set namespace.create=false and label the namespace for the baseline or privileged standard" }}
{{- end }}
{{- end }}

{{/* The image reference, quoted: image.repository@image.digest when a digest is set (a released
chart sets its image's), else image.repository:image.tag or the chart's appVersion. */}}
{{- define "celgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest | quote }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) | quote }}
{{- end }}
{{- end }}

{{/* The common label of every object, and the selector of the pods. */}}
{{- define "celgate.labels" -}}
app.kubernetes.io/name: celgate
{{- end }}

{{/* A CustomResourceDefinition file (config/crd, config/policy-reports) with the annotations that
keep it: Helm leaves it on uninstall, rollback and upgrade (helm.sh/resource-policy), Argo CD
neither prunes it nor deletes it with its Application. Its metadata has no annotations of its own
(e2e/tests/helm.rs checks the rendered CRDs against the files). */}}
{{- define "celgate.kept" -}}
{{- . | replace "\nmetadata:\n" "\nmetadata:\n  annotations:\n    helm.sh/resource-policy: keep\n    argocd.argoproj.io/sync-options: Delete=false,Prune=false\n" }}
{{- end }}
