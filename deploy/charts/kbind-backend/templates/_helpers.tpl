{{/* Names, labels and checks shared by every template of the kbind-backend chart. */}}

{{/* The chart name, overridable with nameOverride. */}}
{{- define "kbind-backend.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name alone when it already contains the chart name. */}}
{{- define "kbind-backend.fullname" -}}
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

{{/* The gateway's objects: full name + "-gateway". */}}
{{- define "kbind-backend.gateway" -}}
{{- printf "%s-gateway" (include "kbind-backend.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The issuer/reaper Deployment and its ServiceAccount: full name + "-controller". */}}
{{- define "kbind-backend.controller" -}}
{{- printf "%s-controller" (include "kbind-backend.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The issuer's RBAC objects: full name + "-issuer". */}}
{{- define "kbind-backend.issuer" -}}
{{- printf "%s-issuer" (include "kbind-backend.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The reaper's RBAC objects: full name + "-reaper". */}}
{{- define "kbind-backend.reaper" -}}
{{- printf "%s-reaper" (include "kbind-backend.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select one component's pods (pass a dict with "ctx" and "component"); they never change after install. */}}
{{- define "kbind-backend.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kbind-backend.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels on every object of the release. */}}
{{- define "kbind-backend.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kbind-backend.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kbind
{{- end }}

{{/* The image reference; the tag defaults to the chart's appVersion. */}}
{{- define "kbind-backend.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The provider's name (`--provider-name`): provider.name, else the release name. */}}
{{- define "kbind-backend.providerName" -}}
{{- default .Release.Name .Values.provider.name }}
{{- end }}

{{/*
The provider CA's ConfigMap: an existing one, the chart's from provider.ca, else kube-root-ca.crt,
which Kubernetes publishes in every namespace: the cluster CA that signs the API server's
certificate unless consumers reach it through a certificate of another CA (then set provider.ca).
*/}}
{{- define "kbind-backend.caConfigMap" -}}
{{- if .Values.provider.existingCAConfigMap }}
{{- .Values.provider.existingCAConfigMap }}
{{- else if .Values.provider.ca }}
{{- printf "%s-provider-ca" (include "kbind-backend.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- "kube-root-ca.crt" }}
{{- end }}
{{- end }}

{{/* The key of the CA in that ConfigMap (kube-root-ca.crt keeps it under ca.crt). */}}
{{- define "kbind-backend.caKey" -}}
{{- if or .Values.provider.existingCAConfigMap .Values.provider.ca }}
{{- .Values.provider.caKey }}
{{- else }}
{{- "ca.crt" }}
{{- end }}
{{- end }}

{{/* The flags of the Kubernetes issuer, which the gateway (for TokenRequests) and the issuer share. */}}
{{- define "kbind-backend.issuerArgs" -}}
- --grants-namespace={{ .Values.grantsNamespace.name }}
- --lease-namespace={{ .Values.leaseNamespace.name }}
{{- with .Values.issuer.claims }}
{{- with .claimable }}
- --claimable-namespaces={{ join "," . }}
{{- end }}
{{- with .unclaimable }}
- --unclaimable-namespaces={{ join "," . }}
{{- end }}
{{- with .maxPerBind }}
- --max-namespaces-per-bind={{ . }}
{{- end }}
{{- with .quota }}
- --namespace-quota={{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* Refuses values that would install a backend that cannot work or is unsafe. */}}
{{- define "kbind-backend.validate" -}}
{{- if and .Values.gateway.enabled (not .Values.provider.url) }}
{{- fail "provider.url must be set: issued kubeconfigs point consumers at it" }}
{{- end }}
{{- if and .Values.gateway.enabled (not (hasPrefix "https://" .Values.provider.url)) }}
{{- fail "provider.url must be an https:// URL: issued kubeconfigs never skip TLS verification" }}
{{- end }}
{{- $name := include "kbind-backend.providerName" . }}
{{- if and .Values.gateway.enabled (not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $name)) }}
{{- fail (printf "provider.name %q is not a DNS label (lower-case letters, digits and '-', at most 63): set provider.name (it defaults to the release name)" $name) }}
{{- end }}
{{- if and .Values.gateway.enabled .Values.provider.ca (not (contains "-----BEGIN CERTIFICATE-----" .Values.provider.ca)) }}
{{- fail "provider.ca holds no PEM certificate: pass the CA file with --set-file provider.ca=FILE, or leave provider.ca empty to use the cluster's kube-root-ca.crt" }}
{{- end }}
{{- if and .Values.gateway.enabled (not .Values.publicURL) }}
{{- fail "publicURL must be set: pickup URLs are built from it" }}
{{- end }}
{{- if and .Values.gateway.enabled (not .Values.auth.tokens.existingSecret) (not .Values.auth.oidc.issuerURL) }}
{{- fail "no authentication: set auth.tokens.existingSecret or auth.oidc.issuerURL" }}
{{- end }}
{{- if and .Values.auth.oidc.issuerURL (not .Values.auth.oidc.clientID) }}
{{- fail "auth.oidc.clientID must be set with auth.oidc.issuerURL" }}
{{- end }}
{{- if and .Values.auth.oidc.issuerURL (not .Values.sessionKey.existingSecret) }}
{{- fail "OIDC needs sessionKey.existingSecret: every gateway replica must verify the state and sessions the others sign" }}
{{- end }}
{{- if not (has .Values.issuer.rbacDelegation (list "escalate" "held")) }}
{{- fail "issuer.rbacDelegation must be escalate or held" }}
{{- end }}
{{- if and .Values.issuer.enabled (eq .Values.issuer.rbacDelegation "held") (not .Values.issuer.delegatedGroups) }}
{{- fail "issuer.rbacDelegation=held needs issuer.delegatedGroups: the API groups of the exported APIs" }}
{{- end }}
{{- if and .Values.reaper.enabled .Values.reaper.reapObjects.enabled (not .Values.reaper.reapObjects.groups) }}
{{- fail "reaper.reapObjects.enabled needs reaper.reapObjects.groups: the API groups of the exported APIs" }}
{{- end }}
{{- end }}
