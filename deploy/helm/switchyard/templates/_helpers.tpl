{{/* Names: <release>-switchyard unless the release name already says switchyard. */}}
{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A component's name: fullname-suffix, within 63 characters. */}}
{{- define "switchyard.component" -}}
{{- printf "%s-%s" (include "switchyard.fullname" .root | trunc (int (sub 62 (len .name))) | trimSuffix "-") .name -}}
{{- end -}}

{{- define "switchyard.labels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "switchyard.versionLabels" . }}
{{- end -}}

{{/* The labels besides the selector's: a pod template has these and its component's selector labels. */}}
{{- define "switchyard.versionLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component (gateway, epp, redis, postgresql, mock). */}}
{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "switchyard.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "switchyard.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "switchyard.fullname" .) -}}
{{- end -}}

{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "switchyard.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "switchyard.eppName" -}}
{{- include "switchyard.component" (dict "root" . "name" "epp") -}}
{{- end -}}

{{- define "switchyard.eppServiceAccountName" -}}
{{- .Values.epp.serviceAccount.name | default (include "switchyard.eppName" .) -}}
{{- end -}}

{{/*
The pod's termination grace: given, it must exceed the preStop sleep plus the drain grace
(the kubelet kills the pod that long after the hook began); left empty, it is their sum plus
the flush allowance.
*/}}
{{- define "switchyard.terminationGracePeriodSeconds" -}}
{{- $d := .Values.drain -}}
{{- $floor := add (int $d.preStopSleepSeconds) (int $d.shutdownGraceSeconds) -}}
{{- if kindIs "invalid" $d.terminationGracePeriodSeconds -}}
{{- add $floor (int $d.flushSeconds) -}}
{{- else if le (int $d.terminationGracePeriodSeconds) $floor -}}
{{- fail (printf "drain.terminationGracePeriodSeconds (%d) must exceed drain.preStopSleepSeconds + drain.shutdownGraceSeconds (%d): the pod would be killed mid-drain" (int $d.terminationGracePeriodSeconds) $floor) -}}
{{- else -}}
{{- int $d.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/* Values that cannot work together fail the render with the reason. */}}
{{- define "switchyard.validate" -}}
{{- $v := .Values -}}
{{- if not (has $v.postgresql.mode (list "bundled" "external" "sqlite")) -}}
{{- fail (printf "postgresql.mode must be bundled, external or sqlite, not %q" $v.postgresql.mode) -}}
{{- end -}}
{{- if not (has $v.redis.mode (list "bundled" "external" "none")) -}}
{{- fail (printf "redis.mode must be bundled, external or none, not %q" $v.redis.mode) -}}
{{- end -}}
{{- if and (eq $v.postgresql.mode "sqlite") (or $v.autoscaling.enabled (gt (int $v.replicaCount) 1)) -}}
{{- fail "postgresql.mode sqlite keeps keys and usage inside one pod: set replicaCount 1 and autoscaling.enabled false, or use PostgreSQL" -}}
{{- end -}}
{{- range $key := list "listen" "shutdown_grace" -}}
{{- if hasKey $v.config $key -}}
{{- fail (printf "config.%s is set by the chart (service.targetPort, drain.shutdownGraceSeconds): leave it out of config" $key) -}}
{{- end -}}
{{- end -}}
{{- if hasKey ($v.config.storage | default dict) "url" -}}
{{- fail "config.storage.url is set by the chart: choose postgresql.mode (external: the URL goes in the Secret as SWITCHYARD_DATABASE_URL)" -}}
{{- end -}}
{{- if hasKey ($v.config.redis | default dict) "url" -}}
{{- fail "config.redis.url is set by the chart: choose redis.mode (external: the URL goes in the Secret as SWITCHYARD_REDIS_URL)" -}}
{{- end -}}
{{- $auth := $v.config.auth | default dict -}}
{{- if or (hasKey $auth "master_key") (hasKey $auth "secret") -}}
{{- fail "config.auth.master_key and config.auth.secret come from the Secret (secrets.masterKey, secrets.secret or secrets.existingSecret): leave them out of config" -}}
{{- end -}}
{{- if and $v.podDisruptionBudget.enabled (not (kindIs "invalid" $v.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" $v.podDisruptionBudget.maxUnavailable)) -}}
{{- fail "podDisruptionBudget: give minAvailable or maxUnavailable, not both (set the other to null)" -}}
{{- end -}}
{{- if and (eq $v.postgresql.mode "bundled") $v.postgresql.bundled.password (not (regexMatch "^[A-Za-z0-9._~-]+$" $v.postgresql.bundled.password)) -}}
{{- fail "postgresql.bundled.password goes into a URL: use letters, digits and ._~- only" -}}
{{- end -}}
{{- if not $v.secrets.existingSecret -}}
{{- if and (eq $v.postgresql.mode "external") (not $v.postgresql.external.url) -}}
{{- fail "postgresql.mode external needs postgresql.external.url, or secrets.existingSecret with SWITCHYARD_DATABASE_URL in it" -}}
{{- end -}}
{{- if and (eq $v.redis.mode "external") (not $v.redis.external.url) -}}
{{- fail "redis.mode external needs redis.external.url, or secrets.existingSecret with SWITCHYARD_REDIS_URL in it" -}}
{{- end -}}
{{- if and $v.secrets.masterKey (lt (len $v.secrets.masterKey) 8) -}}
{{- fail "secrets.masterKey must be at least 8 characters" -}}
{{- end -}}
{{- if and $v.secrets.secret (lt (len $v.secrets.secret) 32) -}}
{{- fail "secrets.secret must be at least 32 characters" -}}
{{- end -}}
{{- range $k, $_ := $v.secrets.env -}}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*$" $k) -}}
{{- fail (printf "secrets.env.%s: not an environment variable name" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $v.autoscaling.enabled (not (or $v.autoscaling.targetCPUUtilizationPercentage $v.autoscaling.targetMemoryUtilizationPercentage)) -}}
{{- fail "autoscaling needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage" -}}
{{- end -}}
{{- if and $v.epp.enabled $v.epp.fleetState -}}
{{- if eq $v.postgresql.mode "sqlite" -}}
{{- fail "epp.fleetState shares the fleet's database: not with postgresql.mode sqlite (a file inside the gateway's pod)" -}}
{{- end -}}
{{- if not (or $v.gateway.enabled $v.secrets.existingSecret) -}}
{{- fail "epp.fleetState needs the fleet's Secret: keep gateway.enabled, or name yours in secrets.existingSecret" -}}
{{- end -}}
{{- if hasKey ($v.epp.config.storage | default dict) "url" -}}
{{- fail "epp.config.storage.url is set by the chart" -}}
{{- end -}}
{{- end -}}
{{- if and $v.epp.enabled (not $v.epp.pools) -}}
{{- fail "epp.enabled needs at least one pool in epp.pools" -}}
{{- end -}}
{{- end -}}

{{/*
The gateway's configuration: config, with what the chart owns set from the values. Secrets stay
${VAR} references, filled from the pod's environment (the Secret) when the gateway loads it.
*/}}
{{- define "switchyard.config" -}}
{{- $v := .Values -}}
{{- $c := deepCopy ($v.config | default dict) -}}
{{- $_ := set $c "listen" (printf "0.0.0.0:%d" (int $v.service.targetPort)) -}}
{{- $_ := set $c "shutdown_grace" (printf "%ds" (int $v.drain.shutdownGraceSeconds)) -}}
{{- $auth := $c.auth | default dict -}}
{{- $_ := set $auth "master_key" "${SWITCHYARD_MASTER_KEY}" -}}
{{- $_ := set $auth "secret" "${SWITCHYARD_SECRET}" -}}
{{- $_ := set $c "auth" $auth -}}
{{- $storage := $c.storage | default dict -}}
{{- if eq $v.postgresql.mode "bundled" -}}
{{- $pg := $v.postgresql.bundled -}}
{{- $_ := set $storage "url" (printf "postgres://%s:${POSTGRES_PASSWORD}@%s:5432/%s" $pg.user (include "switchyard.component" (dict "root" . "name" "postgresql")) $pg.database) -}}
{{- else if eq $v.postgresql.mode "external" -}}
{{- $_ := set $storage "url" "${SWITCHYARD_DATABASE_URL}" -}}
{{- else -}}
{{- $_ := set $storage "url" "sqlite:///var/lib/switchyard/switchyard.db" -}}
{{- end -}}
{{- if not (hasKey $storage "usage_journal_dir") -}}
{{- $_ := set $storage "usage_journal_dir" "/var/lib/switchyard/usage" -}}
{{- end -}}
{{- $_ := set $c "storage" $storage -}}
{{- if ne $v.redis.mode "none" -}}
{{- $redis := $c.redis | default dict -}}
{{- if eq $v.redis.mode "bundled" -}}
{{- $_ := set $redis "url" (printf "redis://%s:6379/0" (include "switchyard.component" (dict "root" . "name" "redis"))) -}}
{{- else -}}
{{- $_ := set $redis "url" "${SWITCHYARD_REDIS_URL}" -}}
{{- end -}}
{{- $_ := set $c "redis" $redis -}}
{{- end -}}
{{- if $v.mock.enabled -}}
{{- $mock := dict "name" "mock" "type" "openai" "url" (printf "http://%s:8000" (include "switchyard.component" (dict "root" . "name" "mock"))) -}}
{{- $_ := set $c "backends" (append ($c.backends | default list) $mock) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/*
The EPP pod's configuration: the epp section; with epp.fleetState the fleet's storage, Redis and
auth (so it checks the fleet's virtual keys and holds their limits and budgets), else a store of
its own in the pod that records no usage (the picker is then open: no keys, no limits).
*/}}
{{- define "switchyard.eppConfig" -}}
{{- $v := .Values -}}
{{- $c := deepCopy ($v.epp.config | default dict) -}}
{{- $pools := list -}}
{{- range $p := $v.epp.pools -}}
{{- $p = deepCopy $p -}}
{{- if and (hasKey $p "inference_pool") (not (hasKey $p.inference_pool "namespace")) -}}
{{- $_ := set $p.inference_pool "namespace" $.Release.Namespace -}}
{{- end -}}
{{- $pools = append $pools $p -}}
{{- end -}}
{{- $_ := set $c "epp" (dict "listen" (printf "0.0.0.0:%d" (int $v.epp.port)) "health_listen" (printf "0.0.0.0:%d" (int $v.epp.healthPort)) "pools" $pools) -}}
{{- $_ := set $c "shutdown_grace" (printf "%ds" (int $v.drain.shutdownGraceSeconds)) -}}
{{- /* The HTTP listener serve runs beside the picker stays on loopback (its /metrics through
kubectl port-forward): without fleetState it would be an open gateway. */ -}}
{{- if not (hasKey $c "listen") -}}
{{- $_ := set $c "listen" "127.0.0.1:4100" -}}
{{- end -}}
{{- if $v.epp.fleetState -}}
{{- $fleet := include "switchyard.config" . | fromYaml -}}
{{- $storage := $c.storage | default dict -}}
{{- $_ := set $storage "url" $fleet.storage.url -}}
{{- $_ := set $c "storage" (merge $storage (dict "usage_journal_dir" "/var/lib/switchyard/usage")) -}}
{{- $_ := set $c "auth" (merge ($c.auth | default dict) $fleet.auth) -}}
{{- if hasKey $fleet "redis" -}}
{{- $_ := set $c "redis" (merge ($c.redis | default dict) $fleet.redis) -}}
{{- end -}}
{{- else -}}
{{- $storage := $c.storage | default dict -}}
{{- $_ := set $storage "url" "sqlite:///var/lib/switchyard/switchyard.db" -}}
{{- $_ := set $c "storage" (merge $storage (dict "usage_journal_dir" "/var/lib/switchyard/usage" "record_usage" false)) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}
