{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "hulk.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-<chart>, or the release name alone when it already contains the chart
name. Truncated to 45 characters so that the longest suffix, "-probe-own-latency", still
fits in 63 (a Service name, "-operator-metrics", is a DNS label: 52 broke a release of 44).
*/}}
{{- define "hulk.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart label value: name-version.
*/}}
{{- define "hulk.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: stable for the release's lifetime (a Deployment's selector is immutable).
Call with (dict "ctx" $ "component" "operator").
*/}}
{{- define "hulk.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hulk.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{/*
Common labels. Call with (dict "ctx" $ "component" "operator"); component may be empty.
*/}}
{{- define "hulk.labels" -}}
helm.sh/chart: {{ include "hulk.chart" .ctx }}
{{ include "hulk.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: hulk
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
ServiceAccount names. Call with (dict "ctx" $ "component" "operator"|"probe").
*/}}
{{- define "hulk.serviceAccountName" -}}
{{- $sa := index .ctx.Values .component "serviceAccount" }}
{{- if $sa.create }}
{{- default (printf "%s-%s" (include "hulk.fullname" .ctx) .component) $sa.name }}
{{- else }}
{{- required (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false" .component .component) $sa.name }}
{{- end }}
{{- end }}

{{/*
Image reference. Call with (dict "ctx" $ "image" .Values.operator.image).
*/}}
{{- define "hulk.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{- /* The namespace of the probe's DaemonSet, ServiceAccount and metrics Service
(probe.namespace, default the release's): with hostNetwork it must allow the "privileged"
Pod Security level, which the operator's namespace then need not. */}}
{{- define "hulk.probeNamespace" -}}
{{- default .Release.Namespace .Values.probe.namespace }}
{{- end }}

{{/*
Name of the kopf peering object.
*/}}
{{- define "hulk.peeringName" -}}
{{- default (include "hulk.fullname" .) .Values.operator.peering.name }}
{{- end }}

{{/*
Milliseconds of a Prometheus duration of the units values.schema.json allows for scrape
settings (ms, s, m, h; "1m30s"), as a decimal string: `include "hulk.durationMs" "30s" | atoi`.
*/}}
{{- define "hulk.durationMs" -}}
{{- $ms := 0 }}
{{- $per := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 }}
{{- range regexFindAll "[0-9]+(ms|s|m|h)" . -1 }}
{{- $ms = add $ms (mul (atoi (regexFind "^[0-9]+" .)) (get $per (regexReplaceAll "^[0-9]+" . ""))) }}
{{- end }}
{{- $ms }}
{{- end }}
