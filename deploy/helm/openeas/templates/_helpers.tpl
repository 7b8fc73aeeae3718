{{/* Names, labels and the pieces several templates share. */}}

{{- define "openeas.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "openeas.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* "<fullname>-<suffix>", kept to 63 characters. Call with (list $ "suffix"). */}}
{{- define "openeas.component" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "openeas.fullname" $root | trunc 50 | trimSuffix "-") (index . 1) }}
{{- end }}

{{/* Selector labels of one component. Call with (list $ "component"). */}}
{{- define "openeas.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "openeas.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* Every object's labels. Call with (list $ "component"). */}}
{{- define "openeas.labels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: openeas
{{ include "openeas.selectorLabels" . }}
{{- end }}

{{/* Replicas run apart from the platform (its database, its Secrets) by default. */}}
{{- define "openeas.servingNamespace" -}}
{{- .Values.serving.namespace | default (printf "%s-serving" .Release.Name) }}
{{- end }}

{{- define "openeas.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- .Values.serviceAccount.name | default (include "openeas.component" (list . "controlplane")) }}
{{- else }}
{{- .Values.serviceAccount.name | default "default" }}
{{- end }}
{{- end }}

{{/*
"repository@digest" when a digest is given (what runs cannot change under the tag), else
"repository:tag", the tag defaulting to the chart's appVersion. Call with (list $ image).
*/}}
{{- define "openeas.image" -}}
{{- $image := index . 1 -}}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository ($image.tag | default (index . 0).Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The Secret the chart writes (admin token, database URL), unless both are external. */}}
{{- define "openeas.secretName" -}}
{{- include "openeas.fullname" . }}
{{- end }}

{{/*
The Secret `openeas secrets` (the install hook) completes with the values nobody gave:
created once in the cluster, never rendered, so `helm template` and GitOps syncs cannot
replace them.
*/}}
{{- define "openeas.generatedSecret" -}}
{{- include "openeas.component" (list . "generated") }}
{{- end }}

{{- define "openeas.generatesAdminToken" -}}
{{- if not (or .Values.auth.adminToken .Values.auth.existingSecret) }}true{{ end }}
{{- end }}

{{- define "openeas.generatesPostgresqlPassword" -}}
{{- $auth := .Values.postgresql.auth }}
{{- if and .Values.postgresql.enabled (not (or $auth.password $auth.existingSecret)) }}true{{ end }}
{{- end }}

{{/* The routes token and the sealing key: the operator's Secret, else generated. */}}
{{- define "openeas.platformSecret" -}}
{{- .Values.auth.existingSecret | default (include "openeas.generatedSecret" .) }}
{{- end }}

{{- define "openeas.adminTokenSecret" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else if .Values.auth.adminToken }}
{{- include "openeas.secretName" . }}
{{- else }}
{{- include "openeas.generatedSecret" . }}
{{- end }}
{{- end }}

{{- define "openeas.postgresqlName" -}}
{{- include "openeas.component" (list . "postgresql") }}
{{- end }}

{{- define "openeas.postgresqlSecret" -}}
{{- $auth := .Values.postgresql.auth }}
{{- if $auth.existingSecret }}
{{- $auth.existingSecret }}
{{- else if $auth.password }}
{{- include "openeas.postgresqlName" . }}
{{- else }}
{{- include "openeas.generatedSecret" . }}
{{- end }}
{{- end }}

{{- define "openeas.postgresqlSecretKey" -}}
{{- $auth := .Values.postgresql.auth }}
{{- if $auth.existingSecret }}
{{- $auth.existingSecretKey }}
{{- else if $auth.password }}
{{- "password" }}
{{- else }}
{{- "postgresql-password" }}
{{- end }}
{{- end }}

{{/* The OSS Secret replicas read (empty: anonymous pulls). */}}
{{- define "openeas.ossSecret" -}}
{{- if .Values.oss.existingSecret }}
{{- .Values.oss.existingSecret }}
{{- else if .Values.oss.accessKeyId }}
{{- include "openeas.component" (list . "oss") }}
{{- end }}
{{- end }}

{{- define "openeas.controlplaneUrl" -}}
{{- printf "http://%s:%d" (include "openeas.component" (list . "controlplane")) (int .Values.controlplane.service.port) }}
{{- end }}

{{/* Scheme and host of an Ingress. Call with the component's ingress values. */}}
{{- define "openeas.ingressUrl" -}}
{{- printf "%s://%s" (ternary "https" "http" (ne .tlsSecret "")) .host }}
{{- end }}

{{- define "openeas.intranetUrl" -}}
{{- if .Values.intranetUrl }}
{{- .Values.intranetUrl }}
{{- else }}
{{- $port := int .Values.gateway.service.port -}}
{{- $host := printf "%s.%s.svc.cluster.local" (include "openeas.component" (list . "gateway")) .Release.Namespace -}}
{{- ternary (printf "http://%s" $host) (printf "http://%s:%d" $host $port) (eq $port 80) }}
{{- end }}
{{- end }}

{{- define "openeas.publicUrl" -}}
{{- if .Values.publicUrl }}
{{- .Values.publicUrl }}
{{- else if .Values.gateway.ingress.enabled }}
{{- include "openeas.ingressUrl" .Values.gateway.ingress }}
{{- else }}
{{- include "openeas.intranetUrl" . }}
{{- end }}
{{- end }}

{{/*
Settings given as a map of camelCase names -> env vars PREFIX + UPPER_SNAKE_CASE, values as
pydantic-settings reads them (strings as they are, everything else as JSON; null unsets).
Empty output for an empty map. Call with (list "OPENEAS_GATEWAY_" map).
*/}}
{{- define "openeas.configEnv" -}}
{{- $env := list -}}
{{- range $name, $value := index . 1 -}}
{{- $env = append $env (dict "name" (printf "%s%s" (index $ 0) ($name | snakecase | upper)) "value" (ternary $value (toJson $value) (kindIs "string" $value))) -}}
{{- end -}}
{{- if $env }}{{ toYaml $env }}{{ end -}}
{{- end }}

{{/*
How a pod reaches the database: OPENEAS_DATABASE_URL from the chart's or the operator's
Secret; for the bundled PostgreSQL a password-less URL plus PGPASSWORD, which libpq reads,
so the password lives only in the PostgreSQL Secret. Call with (list $ secretName) where
secretName holds `database-url` for database.url (the migration hook has its own copy).
*/}}
{{- define "openeas.databaseEnv" -}}
{{- $root := index . 0 -}}
{{- $v := $root.Values -}}
{{- $url := dict "name" "OPENEAS_DATABASE_URL" -}}
{{- $env := list -}}
{{- if $v.postgresql.enabled -}}
{{- $password := dict "name" (include "openeas.postgresqlSecret" $root) "key" (include "openeas.postgresqlSecretKey" $root) -}}
{{- $env = append $env (dict "name" "PGPASSWORD" "valueFrom" (dict "secretKeyRef" $password)) -}}
{{- $_ := set $url "value" (printf "postgresql+psycopg://%s@%s:5432/%s" $v.postgresql.auth.username (include "openeas.postgresqlName" $root) $v.postgresql.auth.database) -}}
{{- else if $v.database.existingSecret -}}
{{- $_ := set $url "valueFrom" (dict "secretKeyRef" (dict "name" $v.database.existingSecret "key" $v.database.existingSecretKey)) -}}
{{- else -}}
{{- $_ := set $url "valueFrom" (dict "secretKeyRef" (dict "name" (index . 1) "key" "database-url")) -}}
{{- end -}}
{{- append $env $url | toYaml }}
{{- end }}

{{/* The image's user (deploy/docker/Dockerfile) and a locked-down container. */}}
{{- define "openeas.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "openeas.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{- define "openeas.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* The data dir (`openeas migrate` creates it) on an emptyDir: the root filesystem is read-only. */}}
{{- define "openeas.dataDirEnv" -}}
- name: OPENEAS_DATA_DIR
  value: /var/lib/openeas
{{- end }}

{{/*
serving.resourceGroups (Kubernetes spelling: nodeSelector) as the JSON of
OPENEAS_K8S_RESOURCE_GROUPS (the settings' spelling: node_selector); optional fields only
when given.
*/}}
{{- define "openeas.resourceGroups" -}}
{{- $groups := dict -}}
{{- range $id, $group := .Values.serving.resourceGroups }}
{{- $out := dict "node_selector" ($group.nodeSelector | default dict) "tolerations" ($group.tolerations | default list) }}
{{- range $from, $to := dict "gpuResource" "gpu_resource" "runtimeClassName" "runtime_class_name" "processorImage" "processor_image" "rollout" "rollout" }}
{{- if hasKey $group $from }}{{ $_ := set $out $to (index $group $from) }}{{ end }}
{{- end }}
{{- $_ := set $groups $id $out }}
{{- end }}
{{- $groups | toJson }}
{{- end }}

{{/* The gateway's route-reader token (OPENEAS_ROUTES_TOKEN), set on both sides. */}}
{{- define "openeas.routesTokenEnv" -}}
- name: OPENEAS_ROUTES_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "openeas.platformSecret" . }}
      key: {{ ternary .Values.auth.existingSecretRoutesKey "routes-token" (ne .Values.auth.existingSecret "") }}
{{- end }}

{{- /* The node model cache's token as env var NAME: (list $ "NAME"). */ -}}
{{- define "openeas.modelCacheTokenEnv" -}}
{{- $ := index . 0 }}
- name: {{ index . 1 }}
  valueFrom:
    secretKeyRef:
      name: {{ include "openeas.platformSecret" $ }}
      key: {{ ternary $.Values.auth.existingSecretModelCacheKey "model-cache-token" (ne $.Values.auth.existingSecret "") }}
{{- end }}

{{/* Where a platform component's pods go: the component's own nodeSelector, tolerations and
affinity, else apart from each other (preferred: a small cluster still schedules them); and
spread over zones and nodes (ScheduleAnyway), counting only the current rollout's pods.
Call with (list $ "component" $values) where $values is .Values.<component>. */}}
{{- define "openeas.placement" -}}
{{- $root := index . 0 }}
{{- $component := index . 1 }}
{{- $c := index . 2 }}
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
{{- if $c.affinity }}
  {{- toYaml $c.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "openeas.selectorLabels" (list $root $component) | nindent 14 }}
{{- end }}
topologySpreadConstraints:
{{- if $c.topologySpreadConstraints }}
  {{- toYaml $c.topologySpreadConstraints | nindent 2 }}
{{- else }}
{{- range $key := list "topology.kubernetes.io/zone" "kubernetes.io/hostname" }}
  - maxSkew: 1
    topologyKey: {{ $key }}
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "openeas.selectorLabels" (list $root $component) | nindent 8 }}
    matchLabelKeys: [pod-template-hash]
{{- end }}
{{- end }}
{{- end }}

{{/* A PodDisruptionBudget for a platform component: a node drain takes one pod at a time.
Call with (list $ "component" $values). */}}
{{- define "openeas.disruptionBudget" -}}
{{- $root := index . 0 }}
{{- $component := index . 1 }}
{{- $c := index . 2 }}
{{- if $c.disruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "openeas.component" (list $root $component) }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "openeas.labels" (list $root $component) | nindent 4 }}
spec:
  maxUnavailable: {{ $c.disruptionBudget.maxUnavailable }}
  # A pod that is not ready serves nothing: evicting it costs nothing.
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "openeas.selectorLabels" (list $root $component) | nindent 6 }}
{{- end }}
{{- end }}

{{/* The bundled Redis of async services' queues (redis.bundled, when redis.url is empty). */}}
{{- define "openeas.redisName" -}}
{{- include "openeas.component" (list . "redis") }}
{{- end }}

{{- define "openeas.redisBundled" -}}
{{- if and .Values.redis.bundled.enabled (not .Values.redis.url) }}true{{ end }}
{{- end }}

{{/* OPENEAS_REDIS_URL for the gateway and the control plane (none: async services get 503). */}}
{{- define "openeas.redisEnv" -}}
{{- if .Values.redis.url }}
- name: OPENEAS_REDIS_URL
  value: {{ .Values.redis.url | quote }}
{{- else if include "openeas.redisBundled" . }}
- name: OPENEAS_REDIS_URL
  value: {{ printf "redis://%s.%s.svc:6379/0" (include "openeas.redisName" .) .Release.Namespace | quote }}
{{- end }}
{{- end }}
