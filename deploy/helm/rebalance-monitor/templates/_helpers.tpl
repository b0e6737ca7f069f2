{{/* The chart's name. */}}
{{- define "rebalance-monitor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the prefix of every object. */}}
{{- define "rebalance-monitor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels the Deployment's pods, the Service and the ServiceMonitor select by. */}}
{{- define "rebalance-monitor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rebalance-monitor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "rebalance-monitor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "rebalance-monitor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "rebalance-monitor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rebalance-monitor.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rebalance-monitor.claimName" -}}
{{- default (printf "%s-checkpoint" (include "rebalance-monitor.fullname" .)) .Values.checkpoint.existingClaim }}
{{- end }}

{{/* "true" when the cluster serves the Prometheus Operator's API (its CRDs are installed); `helm template`
     needs --api-versions monitoring.coreos.com/v1 to say so. */}}
{{- define "rebalance-monitor.operatorApi" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}

{{/* One TOML value: a string, a whole or fractional number, a boolean, or a list of them. Helm reads every
     number in values as a float: a whole one is written as an integer (the job's int options reject 5.0). */}}
{{- define "rebalance-monitor.tomlValue" -}}
{{- if kindIs "slice" . }}
{{- $items := list }}
{{- range . }}{{ $items = append $items (include "rebalance-monitor.tomlValue" .) }}{{ end }}
{{- printf "[%s]" (join ", " $items) }}
{{- else if kindIs "string" . }}
{{- toJson . }}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) }}
{{- if eq (float64 (int64 .)) (float64 .) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else if kindIs "bool" . }}
{{- . }}
{{- else }}
{{- fail (printf "config: %v is not a string, a number, a boolean or a list of them" .) }}
{{- end }}
{{- end }}

{{/* The config value as the job's --config TOML file: one key per `rebalance-monitor run` option. */}}
{{- define "rebalance-monitor.configToml" -}}
{{- range $key, $value := .Values.config }}
{{ toJson $key }} = {{ include "rebalance-monitor.tomlValue" $value }}
{{- end }}
{{- end }}
