//! What kwok is told to do: keep every Node heart-beating as a kubelet does (its Lease renewed
//! every quarter of the lease duration, its status conditions re-stamped at an interval) and
//! move each Pod bound to a Node to Running; a Pod being deleted is removed at once.

use std::time::Duration;

/// The Lease duration kwok writes; it renews a quarter of it, as a kubelet does (40 s, every
/// 10 s, are the kubelet's defaults).
pub const LEASE_SECONDS: u64 = 40;

/// The configuration file for `kwok --config`: the options and the stages.
///
/// Each Node's status is re-stamped after a delay drawn uniformly between half and one and a
/// half `heartbeat` (a kubelet's `nodeStatusReportFrequency` is 5 minutes, its
/// `nodeStatusUpdateFrequency` 10 s: the interval sets how much the benchmark stresses).
/// Only `lastHeartbeatTime` changes: nothing poolkeeper projects from a Node moves.
pub fn config(heartbeat: Duration, pod_cidr: &str) -> String {
    let options = format!(
        "apiVersion: config.kwok.x-k8s.io/v1alpha1\n\
         kind: KwokConfiguration\n\
         options:\n  \
           cidr: \"{pod_cidr}\"\n  \
           nodeLeaseDurationSeconds: {LEASE_SECONDS}\n  \
           nodeLeaseParallelism: 16\n  \
           nodePlayStageParallelism: 8\n  \
           podPlayStageParallelism: 16\n"
    );
    let half = heartbeat.as_millis() / 2;
    let one_and_a_half = heartbeat.as_millis() * 3 / 2;
    let heartbeat_stage = NODE_HEARTBEAT
        .replace("{half}", &half.to_string())
        .replace("{one_and_a_half}", &one_and_a_half.to_string());
    format!("{options}---\n{heartbeat_stage}---\n{POD_STAGES}")
}

/// Re-stamps `lastHeartbeatTime` of every condition a Ready Node has, after a delay
/// between `{half}` and `{one_and_a_half}` milliseconds (filled in by [`config`]).
const NODE_HEARTBEAT: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values: ['True']
  delay:
    durationMilliseconds: {half}
    jitterDurationMilliseconds: {one_and_a_half}
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range .status.conditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ .lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
"#;

/// A bound Pod becomes Running with its IPs; a Pod being deleted goes at once.
const POD_STAGES: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-running
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.podIP'
      operator: 'DoesNotExist'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Initialized}
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Ready}
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: ContainersReady}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      {{ with NodeIPsWith .spec.nodeName }}
      hostIP: {{ index . 0 | Quote }}
      {{ end }}
      {{ with PodIPsWith .spec.nodeName false ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      podIP: {{ index . 0 | Quote }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  next:
    finalizers:
      empty: true
    delete: true
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_delay_centres_on_the_interval() {
        let text = config(Duration::from_secs(60), "10.64.0.0/10");
        assert!(text.contains("durationMilliseconds: 30000"), "{text}");
        assert!(text.contains("jitterDurationMilliseconds: 90000"), "{text}");
        assert!(text.contains("{{ $now := Now }}"), "{text}");
        assert_eq!(text.matches("kind: Stage\n").count(), 3);
    }
}
