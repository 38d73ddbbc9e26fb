{{/* Names and labels shared by every template of the konnector chart. */}}

{{/* The chart name, overridable with nameOverride. */}}
{{- define "konnector.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name alone when it already contains the chart name. */}}
{{- define "konnector.fullname" -}}
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

{{/* Labels that select the konnector pods; they never change after install. */}}
{{- define "konnector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "konnector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every object of the release. */}}
{{- define "konnector.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "konnector.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kbind
{{- end }}

{{/* The ServiceAccount the konnector runs as. */}}
{{- define "konnector.serviceAccountName" -}}
{{- default (include "konnector.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* The image reference; the tag defaults to the chart's appVersion. */}}
{{- define "konnector.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
