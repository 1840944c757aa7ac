{{/* The pod of a job running `icache certs` (the rotation CronJob and the install
hooks): (dict "ctx" $ "serviceAccount" "name" "args" (list ...)). */}}
{{- define "ic.certsPod" -}}
{{- $ctx := .ctx -}}
metadata:
  labels:
    {{- include "ic.podLabels" "cert-rotation" | nindent 4 }}
spec:
  serviceAccountName: {{ .serviceAccount }}
  restartPolicy: Never
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    seccompProfile:
      type: RuntimeDefault
  {{- include "ic.scheduling" (dict "ctx" $ctx "values" (dict)) | nindent 2 }}
  containers:
    - name: certs
      image: {{ include "ic.image" (dict "ctx" $ctx "name" "worker") }}
      imagePullPolicy: {{ $ctx.Values.images.worker.pullPolicy }}
      args:
        - certs
        - --namespace=$(POD_NAMESPACE)
        {{- range .args }}
        - {{ . }}
        {{- end }}
      env:
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
      resources:
        requests:
          cpu: 10m
          memory: 64Mi
        limits:
          memory: 256Mi
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        runAsNonRoot: true
        capabilities:
          drop: ["ALL"]
{{- end -}}
