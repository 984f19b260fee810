{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: the release name when it already contains
the chart name (`sluice` → `sluice`), else `<release>-<chart>`.
*/}}
{{- define "sluice.fullname" -}}
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

{{/*
Name of the operator Deployment, its Service and its leader-election Lease.
*/}}
{{- define "sluice.operatorName" -}}
{{- printf "%s-operator" (include "sluice.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sluice.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object of the chart.
*/}}
{{- define "sluice.labels" -}}
helm.sh/chart: {{ include "sluice.chart" . }}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sluice
{{- end }}

{{/*
Labels on the operator's own objects (Deployment, pods, RBAC, Service).
*/}}
{{- define "sluice.operatorLabels" -}}
{{ include "sluice.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Labels selecting the operator pods. Deliberately not
app.kubernetes.io/name=sluice-worker: that label selects worker pods.
*/}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sluice.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator image: repository:tag, the tag defaulting to appVersion.
*/}}
{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The worker image (`--worker-image`): workerImage, else the operator's image.
*/}}
{{- define "sluice.workerImage" -}}
{{- default (include "sluice.image" .) .Values.workerImage }}
{{- end }}

{{/*
Rules for StreamJobs and what the operator creates for them: exactly the
API calls sluice-operator makes (see operator/src).
*/}}
{{- define "sluice.jobRules" -}}
# Watches StreamJobs; adds and removes its finalizer (a JSON patch).
- apiGroups: ["sluice.dev"]
  resources: ["streamjobs"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["sluice.dev"]
  resources: ["streamjobs/status"]
  verbs: ["patch"]
# Owner references with blockOwnerDeletion on the children (checked where
# the OwnerReferencesPermissionEnforcement admission plugin is on).
- apiGroups: ["sluice.dev"]
  resources: ["streamjobs/finalizers"]
  verbs: ["update"]
# The children of a StreamJob: watched, and written with server-side apply
# (patch; create when the object is new). The StatefulSet is also read to
# see which assignment its pods run.
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["list", "watch", "create", "patch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["list", "watch", "create", "patch"]
# Worker pods: counted while draining for a rescale, never modified.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
# Credentials of the Kafka sources a StreamJob references (spec.sources[].kafka.secretRef).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
# Events about StreamJobs (kube-runtime's Recorder: events.k8s.io/v1).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
