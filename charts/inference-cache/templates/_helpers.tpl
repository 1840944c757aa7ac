{{/* The namespace of every namespaced object. */}}
{{- define "ic.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{/* Helm's own labels, on top-level metadata only (not on pod templates: a chart
upgrade must not roll every pod). */}}
{{- define "ic.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Labels of an object of a component: (dict "ctx" $ "component" "webhook"). */}}
{{- define "ic.labels" -}}
app.kubernetes.io/name: inference-cache
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
app.kubernetes.io/part-of: inference-cache
{{ include "ic.helmLabels" .ctx }}
{{- end -}}

{{/* Labels of a pod template and selector of a component. */}}
{{- define "ic.selector" -}}
app.kubernetes.io/name: inference-cache
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{- define "ic.podLabels" -}}
{{ include "ic.selector" . }}
app.kubernetes.io/part-of: inference-cache
{{- end -}}

{{/* repository:tag of an image value; the tag defaults to the chart's appVersion. */}}
{{- define "ic.image" -}}
{{- $image := index .ctx.Values.images .name -}}
{{- printf "%s:%s" $image.repository (default .ctx.Chart.AppVersion $image.tag) -}}
{{- end -}}

{{/* Scheduling of a pod: the process's value, else the chart-wide default.
(dict "ctx" $ "values" .Values.webhook) */}}
{{- define "ic.scheduling" -}}
{{- $v := .values -}}
{{- $g := .ctx.Values -}}
{{- with (default $g.priorityClassName $v.priorityClassName) }}
priorityClassName: {{ . }}
{{- end }}
{{- with (default $g.nodeSelector $v.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $g.tolerations $v.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $g.affinity $v.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $g.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The two environment variables that carry the Redis password, when there is one. */}}
{{- define "ic.redisPasswordSecret" -}}
{{- if .Values.redis.enabled -}}
inference-cache-redis-auth
{{- else -}}
{{- .Values.externalRedis.passwordSecret.name -}}
{{- end -}}
{{- end -}}

{{- define "ic.redisPasswordKey" -}}
{{- if .Values.redis.enabled -}}
password
{{- else -}}
{{- .Values.externalRedis.passwordSecret.key -}}
{{- end -}}
{{- end -}}

{{- define "ic.redisURL" -}}
{{- if .Values.redis.enabled -}}
redis://inference-cache-redis:6379/0
{{- else -}}
{{- required "externalRedis.url is required when redis.enabled is false" .Values.externalRedis.url -}}
{{- end -}}
{{- end -}}

{{- define "ic.selfSigned" -}}
{{- if eq .Values.certificates.mode "self-signed" -}}true{{- end -}}
{{- end -}}

{{/* Fail on a certificates.mode the chart does not know. */}}
{{- define "ic.validate" -}}
{{- if not (has .Values.certificates.mode (list "self-signed" "cert-manager")) -}}
{{- fail (printf "certificates.mode must be self-signed or cert-manager, not %q" .Values.certificates.mode) -}}
{{- end -}}
{{- end -}}
