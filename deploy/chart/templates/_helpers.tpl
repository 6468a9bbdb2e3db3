{{/* The name of every object of the release; the webhook configurations and the Lease too
(config webhookSelectors.configurationName and leaderElection.leaseName). */}}
{{- define "poolkeeper.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "poolkeeper.labels" -}}
app.kubernetes.io/name: poolkeeper
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "poolkeeper.selectorLabels" -}}
app.kubernetes.io/name: poolkeeper
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "poolkeeper.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Service the API server calls the webhooks through, and its DNS names. */}}
{{- define "poolkeeper.webhookService" -}}
{{- printf "%s-webhook" (include "poolkeeper.fullname" .) -}}
{{- end -}}

{{/* The Secret of the serving certificate: existingSecret, or the one poolkeeper (or
cert-manager) writes. */}}
{{- define "poolkeeper.servingSecret" -}}
{{- default (printf "%s-webhook-tls" (include "poolkeeper.fullname" .)) .Values.existingSecret -}}
{{- end -}}

{{/* webhook.certificate.source: poolkeeper issues its own certificate unless cert-manager or
an existing Secret provides it. */}}
{{- define "poolkeeper.certificateSource" -}}
{{- if or .Values.certManager.enabled .Values.existingSecret -}}secret{{- else -}}self{{- end -}}
{{- end -}}

{{- define "poolkeeper.placementConfigMap" -}}
{{- printf "%s-placement" (include "poolkeeper.fullname" .) -}}
{{- end -}}

{{/* poolkeeper's configuration file: what the chart sets, with .Values.config merged over it. */}}
{{- define "poolkeeper.config" -}}
{{- $fullname := include "poolkeeper.fullname" . -}}
{{- $config := dict
  "namespace" .Values.machineNamespace
  "leaderElection" (dict "enabled" true "leaseName" $fullname "leaseNamespace" .Release.Namespace)
  "placement" (dict
    "poolLabel" .Values.placement.poolLabel
    "defaultMode" .Values.placement.defaultMode
    "defaultConstraints" .Values.placement.defaultConstraints
    "excludedNamespaces" .Values.placement.excludedNamespaces
    "policyConfigMap" (dict "namespace" .Release.Namespace "name" (include "poolkeeper.placementConfigMap" .) "key" "placement.yaml"))
  "webhook" (dict
    "listen" (printf "0.0.0.0:%v" .Values.webhook.port)
    "certificate" (dict
      "source" (include "poolkeeper.certificateSource" .)
      "secretName" (include "poolkeeper.servingSecret" .)
      "serviceName" (include "poolkeeper.webhookService" .)))
  "webhookSelectors" (dict "configurationName" $fullname)
  "logging" (dict "level" .Values.logging.level "format" .Values.logging.format)
-}}
{{- toYaml (mergeOverwrite $config (deepCopy .Values.config)) -}}
{{- end -}}

{{/* The name of both webhook configurations, as the rendered configuration has it. */}}
{{- define "poolkeeper.webhookConfigurationName" -}}
{{- (include "poolkeeper.config" . | fromYaml).webhookSelectors.configurationName -}}
{{- end -}}

{{/* The namespaces no webhook entry matches, as poolkeeper computes them from the rendered
configuration: placement.excludedNamespaces and its own namespace, the policy ConfigMap's;
sorted and deduplicated, as the leader writes them into the selectors. */}}
{{- define "poolkeeper.excludedNamespaces" -}}
{{- $placement := (include "poolkeeper.config" . | fromYaml).placement -}}
{{- append $placement.excludedNamespaces $placement.policyConfigMap.namespace | uniq | sortAlpha | join ", " -}}
{{- end -}}

{{/* cert-manager's CA injector fills in the caBundle from the serving certificate. */}}
{{- define "poolkeeper.injectCA" -}}
{{- if .Values.certManager.enabled -}}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "poolkeeper.fullname" . }}-webhook
{{- end -}}
{{- end -}}

{{/* What every entry shares: the Service it is called through, the policy on failure. */}}
{{- define "poolkeeper.webhookEntry" -}}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: {{ .root.Values.webhook.failurePolicy }}
timeoutSeconds: {{ .root.Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
clientConfig:
  service:
    name: {{ .service }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
{{- end -}}

{{/* The installer's one matchConditions entry of every webhook entry: no Pod of an excluded
namespace reaches poolkeeper, even before the leader first writes the selectors (they are its,
and the chart leaves them out). */}}
{{- define "poolkeeper.notExcluded" -}}
{{- $quoted := list -}}
{{- range (include "poolkeeper.excludedNamespaces" . | splitList ", ") -}}
{{- $quoted = append $quoted (printf "'%s'" .) -}}
{{- end -}}
matchConditions:
  - name: poolkeeper.io/not-excluded
    expression: "!(request.namespace in [{{ join ", " $quoted }}])"
{{- end -}}

{{/* An alert's runbook: the published docs/runbooks.md (prometheusRule.runbookBaseURL), else
the section's name. */}}
{{- define "poolkeeper.runbook" -}}
{{- $anchor := lower .alert -}}
{{- with .root.Values.prometheusRule.runbookBaseURL -}}
runbook_url: {{ printf "%s#%s" . $anchor }}
{{- else -}}
runbook: {{ printf "docs/runbooks.md#%s" $anchor }}
{{- end -}}
{{- end -}}

{{/* Twice the rendered configuration's leaderElection.leaseDuration (poolkeeper's default
when unset), as a Prometheus duration. */}}
{{- define "poolkeeper.twiceLeaseDuration" -}}
{{- $election := (include "poolkeeper.config" . | fromYaml).leaderElection -}}
{{- $lease := toString (default "15s" $election.leaseDuration) -}}
{{- if not (regexMatch "^[0-9]+[smh]$" $lease) -}}
{{- fail (printf "config.leaderElection.leaseDuration %q: the PrometheusRule needs a whole number of s, m or h" $lease) -}}
{{- end -}}
{{- $unit := regexFind "[smh]$" $lease -}}
{{- printf "%d%s" (mul 2 (int (trimSuffix $unit $lease))) $unit -}}
{{- end -}}
