{{/* ICACHE_REDIS_URL, from the ConfigMap. */}}
{{- define "ic.redisURLEnv" -}}
- name: ICACHE_REDIS_URL
  valueFrom:
    configMapKeyRef:
      name: inference-cache-config
      key: ICACHE_REDIS_URL
{{- end -}}

{{/* ICACHE_REDIS_PASSWORD when there is a password Secret (joined with
ICACHE_REDIS_URL unless the URL carries one). */}}
{{- define "ic.redisPasswordEnv" -}}
{{- with include "ic.redisPasswordSecret" . }}
- name: ICACHE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ include "ic.redisPasswordKey" $ }}
{{- end }}
{{- end -}}
