{{/* The values that take one of a few words, checked once for every template. */}}
{{- define "celgate.check" -}}
{{- if not (has .Values.certificates.source (list "self" "cert-manager")) }}
{{- fail (printf "certificates.source is %q: self or cert-manager" .Values.certificates.source) }}
{{- end }}
{{- if not (has .Values.logFormat (list "json" "text")) }}
{{- fail (printf "logFormat is %q: json or text" .Values.logFormat) }}
{{- end }}
{{- if not (has .Values.webhookRules (list "" "policies" "all")) }}
{{- fail (printf "webhookRules is %q: policies, all or \"\"" .Values.webhookRules) }}
{{- end }}
{{- if and .Values.monitoring.podMonitor.enabled .Values.monitoring.serviceMonitor.enabled }}
{{- fail "monitoring: enable podMonitor or serviceMonitor, not both (each replica would be scraped twice)" }}
{{- end }}
{{- if and .Values.authentication.clientCA.secretName .Values.authentication.clientCA.configMapName }}
{{- fail "authentication.clientCA: set secretName or configMapName, not both" }}
{{- end }}
{{- end }}

{{/* The common label of every object, and the selector of the pods. */}}
{{- define "celgate.labels" -}}
app.kubernetes.io/name: celgate
{{- end }}
