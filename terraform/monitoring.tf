# Alert policies and a dashboard in Cloud Monitoring. Every alert notifies
# var.notification_channels and links to its section of docs/runbook.md
# (var.runbook_url); thresholds are var.alert_thresholds.
#
# Where the numbers come from:
#
#   txfence's own metrics (shared/metrics; docs/observability.md) are exported
#   by the OpenTelemetry Google Cloud exporter
#   (GoogleCloudPlatform/opentelemetry-operations-go exporter/metric) with
#   its default prefix (shared/telemetry, TXFENCE_TELEMETRY=gcp, set in
#   main.tf), so lease_fenced_total arrives as the metric type
#   workload.googleapis.com/lease_fenced_total, against one monitored
#   resource type, generic_task (namespace "txfence", job = the Cloud Run
#   service, task_id = the instance), with the instruments' attributes as
#   metric labels (result, op, reason; chain_id and signer on
#   pending_oldest_age_seconds; chain_id, endpoint, send_only and state on
#   rpc_endpoint_state; shard on the outbox gauges when sharded)
#   plus service_name, service_namespace and service_instance_id. Counters
#   are CUMULATIVE INT64, histograms CUMULATIVE DISTRIBUTION, gauges GAUGE
#   (writer_queue_depth, outbox_backlog_rows and outbox_failing_rows INT64,
#   pending_oldest_age_seconds and outbox_oldest_age_seconds DOUBLE);
#   TestIssue13_ExportToCloudMonitoring
#   (functions/internal/exporttest) checks exactly this against a fake of
#   Cloud Monitoring. Cloud Monitoring only knows a workload metric once it
#   was first written, and refuses a condition on an unknown metric (404
#   "Cannot find metric(s)"), which would fail the first apply on a fresh
#   project. So:
#     - threshold conditions on them are PromQL (a metric type maps to
#       workload_googleapis_com:NAME, a distribution to
#       NAME_bucket/_count/_sum) with disable_metric_validation, the one
#       kind of condition Cloud Monitoring creates on a metric that does not
#       exist yet (the provider's documentation of the field says so);
#     - metric-filter conditions on them (absence) exist only with
#       var.workload_metric_alerts, which docs/deploy.md turns on once the
#       first OutboxSweep has written its figures (and the command there
#       checks that it did).
#   tests/alerts.tftest.hcl checks both rules on every policy of
#   local.alert_policies.
#
#   Google's own metrics (Cloud Run request counts, Cloud SQL, Pub/Sub) always
#   exist; their conditions are plain metric filters. A broken sweep is
#   told by those (its Cloud Run service answering no 2xx), not by the
#   figures the sweep itself writes, which stop with it.

locals {
  # One label set for everything this file creates.
  monitoring_labels = { app = "txfence" }

  # Each alert's section of docs/runbook.md (GitHub's heading anchors).
  # terraform/terraform_test.go checks that every one is a heading there.
  runbook = {
    fenced_writes   = "${var.runbook_url}#fenced-writes-spiking"
    pending_age     = "${var.runbook_url}#pending-transactions-too-old"
    delegated       = "${var.runbook_url}#a-signer-is-delegated-eip-7702"
    endpoint        = "${var.runbook_url}#an-rpc-endpoint-unhealthy"
    no_endpoint     = "${var.runbook_url}#a-chain-without-a-healthy-endpoint"
    stuck           = "${var.runbook_url}#stuck-transactions-rising"
    dead_letters    = "${var.runbook_url}#dead-letters-waiting"
    api_5xx         = "${var.runbook_url}#api-5xx-rate"
    sql_cpu         = "${var.runbook_url}#cloud-sql-cpu-high"
    sql_connections = "${var.runbook_url}#cloud-sql-connections-near-the-limit"
    lease_takeovers = "${var.runbook_url}#lease-take-overs-churning"
    outbox          = "${var.runbook_url}#outbox-not-draining"
    contradicted    = "${var.runbook_url}#a-failed-outcome-contradicted-by-the-chain"
    sweep           = "${var.runbook_url}#a-sweep-not-succeeding"
    metrics_absent  = "${var.runbook_url}#txfence-metrics-not-arriving"
  }

  # Cloud SQL's database_id of each instance (project:instance), by key.
  sql_database_ids   = { for k, d in local.db_instances : k => "${var.project}:${d.name}" }
  sql_instances_text = join(", ", [for k in local.shard_keys : local.db_instances[k].name])
  # The dashboard's PromQL matcher for all of them.
  sql_database_ids_re = join("|", [for k in local.shard_keys : local.sql_database_ids[k]])
}

resource "google_monitoring_alert_policy" "fenced_writes" {
  display_name          = "txfence: fenced writes spiking"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: more than ${var.alert_thresholds.fenced_writes} fenced writes in 10 minutes"
    mime_type = "text/markdown"
    content   = <<-EOT
      Writes were refused because their writer's lease (fencing token) was no
      longer current (`lease_fenced_total`). Each one is harmless by design (a
      fenced write changes nothing), but many mean instances keep losing
      their signers' leases mid-work: stalls longer than the lease
      (TXFENCE_LEASE_DURATION), CPU starvation, or a slow database.

      Runbook: ${local.runbook.fenced_writes}
    EOT
    links {
      display_name = "Runbook: fenced writes spiking"
      url          = local.runbook.fenced_writes
    }
  }

  conditions {
    display_name = "lease_fenced_total increase over 10m > ${var.alert_thresholds.fenced_writes}"
    condition_prometheus_query_language {
      query                     = "sum(increase(workload_googleapis_com:lease_fenced_total[10m])) > ${var.alert_thresholds.fenced_writes}"
      duration                  = "0s"
      evaluation_interval       = "60s"
      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "pending_age" {
  display_name          = "txfence: pending transactions too old"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: a signer's oldest pending transaction is older than ${var.alert_thresholds.pending_age_seconds}s"
    mime_type = "text/markdown"
    content   = <<-EOT
      The oldest transaction of a signer that is not final yet
      (`pending_oldest_age_seconds`, by chain and signer) has waited longer
      than ${var.alert_thresholds.pending_age_seconds}s. Usually fees below
      the market, an unfunded signer, an RPC provider that drops
      broadcasts, or a nonce gap; left alone it becomes STUCK
      (TXFENCE_STUCK_AFTER).

      Runbook: ${local.runbook.pending_age}
    EOT
    links {
      display_name = "Runbook: pending transactions too old"
      url          = local.runbook.pending_age
    }
  }

  conditions {
    display_name = "pending_oldest_age_seconds by signer > ${var.alert_thresholds.pending_age_seconds}"
    condition_prometheus_query_language {
      query                     = "max by (chain_id, signer) (workload_googleapis_com:pending_oldest_age_seconds) > ${var.alert_thresholds.pending_age_seconds}"
      duration                  = "300s"
      evaluation_interval       = "60s"
      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "delegated" {
  display_name          = "txfence: a signer is delegated (EIP-7702)"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: a signer's account carries an EIP-7702 delegation"
    mime_type = "text/markdown"
    content   = <<-EOT
      A signer's account code begins with the EIP-7702 delegation
      designator 0xef0100, or a node refused its broadcast with "in-flight
      transaction limit reached for delegated accounts"
      (`delegated_signers`, by chain and signer, set by its drains). Nodes
      hold one executable transaction of such a sender, so txfence sends
      its transactions one at a time (TXFENCE_DELEGATED_MAX_IN_FLIGHT):
      its throughput drops to about one transaction a block. Someone
      signed a delegation with the signer's key, outside txfence.

      Runbook: ${local.runbook.delegated}
    EOT
    links {
      display_name = "Runbook: a signer is delegated (EIP-7702)"
      url          = local.runbook.delegated
    }
  }

  conditions {
    display_name = "delegated_signers by signer > 0"
    condition_prometheus_query_language {
      query                     = "max by (chain_id, signer) (workload_googleapis_com:delegated_signers) > 0"
      duration                  = "0s"
      evaluation_interval       = "60s"
      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "endpoint" {
  display_name          = "txfence: an RPC endpoint unhealthy"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: an RPC endpoint has been lagging or dead for ${var.alert_thresholds.endpoint_bad_seconds}s"
    mime_type = "text/markdown"
    content   = <<-EOT
      An RPC endpoint of a chain (TXFENCE_CHAINS, or a send-only endpoint
      of TXFENCE_SEND_ONLY) has been lagging (its head more blocks behind
      the best head than the chain allows) or dead (its calls failing at
      the transport level) for ${var.alert_thresholds.endpoint_bad_seconds}s, as an instance's client
      saw it (`rpc_endpoint_state`, by chain and endpoint name; the lag in
      `rpc_endpoint_lag_blocks`). Reads and broadcasts go to the healthy
      endpoints meanwhile: the chain has less redundancy, or a signer's
      private route is down.

      Runbook: ${local.runbook.endpoint}
    EOT
    links {
      display_name = "Runbook: an RPC endpoint unhealthy"
      url          = local.runbook.endpoint
    }
  }

  conditions {
    display_name = "rpc_endpoint_state not healthy, by chain and endpoint"
    condition_prometheus_query_language {
      query                     = "max by (chain_id, endpoint) (workload_googleapis_com:rpc_endpoint_state{state!=\"healthy\"}) > 0"
      duration                  = "${var.alert_thresholds.endpoint_bad_seconds}s"
      evaluation_interval       = "60s"
      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "no_endpoint" {
  display_name          = "txfence: a chain without a healthy endpoint"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: no read endpoint of a chain has been healthy for 2 minutes"
    mime_type = "text/markdown"
    content   = <<-EOT
      No instance has seen any read endpoint of a chain healthy for 2
      minutes (`rpc_endpoint_state{send_only="false",state="healthy"}`, by
      chain): every one lags or is dead. Reads go to the best available
      one (a lagging node sees receipts and nonces late) or fail;
      broadcasts fail and back off. Work that backs off because every
      endpoint was down resumes as soon as one answers again.

      Runbook: ${local.runbook.no_endpoint}
    EOT
    links {
      display_name = "Runbook: a chain without a healthy endpoint"
      url          = local.runbook.no_endpoint
    }
  }

  conditions {
    display_name = "no read endpoint healthy, by chain"
    condition_prometheus_query_language {
      query                     = "max by (chain_id) (workload_googleapis_com:rpc_endpoint_state{send_only=\"false\",state=\"healthy\"}) < 1"
      duration                  = "120s"
      evaluation_interval       = "60s"
      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "outbox" {
  display_name          = "txfence: outbox not draining"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: outbox rows waiting longer than ${var.alert_thresholds.outbox_age_seconds}s to be published"
    mime_type = "text/markdown"
    content   = <<-EOT
      The oldest outbox row (a submit or receipt prompt, or a completion
      message, committed and not yet published to Pub/Sub) has waited longer
      than ${var.alert_thresholds.outbox_age_seconds}s, as the OutboxSweep
      measured it (`outbox_oldest_age_seconds`, by shard when sharded).
      Invocations publish their rows within seconds and the sweep retries
      every minute, so publishing has been failing for minutes: Pub/Sub
      permissions, a topic removed, or a Pub/Sub outage. Nothing is lost,
      but prompts (so broadcasts) and completion messages wait. (An
      OutboxSweep that does not run at all is the alert "OutboxSweep not
      succeeding".)

      Runbook: ${local.runbook.outbox}
    EOT
    links {
      display_name = "Runbook: outbox not draining"
      url          = local.runbook.outbox
    }
  }

  conditions {
    display_name = "outbox_oldest_age_seconds > ${var.alert_thresholds.outbox_age_seconds}"
    condition_prometheus_query_language {
      query                     = "max by (shard) (workload_googleapis_com:outbox_oldest_age_seconds) > ${var.alert_thresholds.outbox_age_seconds}"
      duration                  = "60s"
      evaluation_interval       = "60s"
      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "stuck" {
  display_name          = "txfence: STUCK transactions rising"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: ${var.alert_thresholds.stuck} or more transactions entered STUCK in 30 minutes"
    mime_type = "text/markdown"
    content   = <<-EOT
      Transactions entered STUCK (`stuck_total`, by reason): rebroadcast too
      often, refused for good by the node, at the fee cap, or pending longer
      than TXFENCE_STUCK_AFTER. STUCK is not terminal, but the stuck
      resolution policy (TXFENCE_STUCK_POLICY, default noop) or an operator
      must act, and later nonces of the signer wait behind it.

      Runbook: ${local.runbook.stuck}
    EOT
    links {
      display_name = "Runbook: STUCK transactions rising"
      url          = local.runbook.stuck
    }
  }

  conditions {
    display_name = "stuck_total increase over 30m >= ${var.alert_thresholds.stuck}"
    condition_prometheus_query_language {
      query                     = "sum(increase(workload_googleapis_com:stuck_total[30m])) >= ${var.alert_thresholds.stuck}"
      duration                  = "0s"
      evaluation_interval       = "60s"
      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "3600s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "contradicted" {
  display_name          = "txfence: a FAILED_FINAL outcome contradicted by the chain"
  combiner              = "OR"
  severity              = "CRITICAL"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: a transaction reported FAILED_FINAL has an attempt mined"
    mime_type = "text/markdown"
    content   = <<-EOT
      The finality sweep found an attempt of a transaction it had reported
      FAILED_FINAL (`nonce_consumed_externally`) mined on the canonical
      chain (`outcome_contradicted_total`). The caller was told the
      transaction failed and may send it again: money can move twice. This
      is a bug, never corrected silently; the error log line names the
      transaction, the attempt and the block.

      Runbook: ${local.runbook.contradicted}
    EOT
    links {
      display_name = "Runbook: a FAILED_FINAL outcome contradicted by the chain"
      url          = local.runbook.contradicted
    }
  }

  conditions {
    display_name = "outcome_contradicted_total increased"
    condition_prometheus_query_language {
      query                     = "sum(increase(workload_googleapis_com:outcome_contradicted_total[1h])) > 0"
      duration                  = "0s"
      evaluation_interval       = "60s"
      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "86400s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "dead_letters" {
  display_name          = "txfence: dead letters waiting"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: prompts in the dead-letter topic"
    mime_type = "text/markdown"
    content   = <<-EOT
      A submit or receipt prompt failed on every one of its deliveries
      (max_delivery_attempts) and was moved to txfence-deadletter: its work
      kept failing (RPC endpoints down, database unavailable, the function
      crashing), not merely waiting. Prompts that only wait (receipt not
      mined yet, signer busy) are acked once a sweep owns their work and
      never land here. The work itself is in PostgreSQL and the sweeps pick
      it up again; the dead letter says something is broken.

      It stays open until the dead letters are read and acknowledged from
      txfence-deadletter-pull.

      Runbook: ${local.runbook.dead_letters}
    EOT
    links {
      display_name = "Runbook: dead letters waiting"
      url          = local.runbook.dead_letters
    }
  }

  # Something is waiting in the operators' subscription.
  conditions {
    display_name = "txfence-deadletter-pull not empty"
    condition_threshold {
      filter          = "resource.type = \"pubsub_subscription\" AND resource.label.subscription_id = \"${google_pubsub_subscription.deadletter_pull.name}\" AND metric.type = \"pubsub.googleapis.com/subscription/num_undelivered_messages\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "60s"

      aggregations {
        alignment_period   = "60s"
        per_series_aligner = "ALIGN_MAX"
      }
    }
  }

  # Which push subscription gave up on a prompt (submit or receipt).
  conditions {
    display_name = "prompts dead-lettered by a push subscription"
    condition_threshold {
      filter          = "resource.type = \"pubsub_subscription\" AND (resource.label.subscription_id = \"${local.push_subscriptions.submit.name}\" OR resource.label.subscription_id = \"${local.push_subscriptions.receipt.name}\") AND metric.type = \"pubsub.googleapis.com/subscription/dead_letter_message_count\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.subscription_id"]
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "api_5xx" {
  display_name          = "txfence: API 5xx rate"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: more than ${var.alert_thresholds.api_5xx_ratio * 100}% of API answers are 5xx"
    mime_type = "text/markdown"
    content   = <<-EOT
      The share of txfence-api answers with a 5xx status over 5 minutes is
      above ${var.alert_thresholds.api_5xx_ratio}. 503 with Retry-After is
      the database (or a chain, for gas estimates) unavailable; 500 is a bug;
      504 and 502 come from Cloud Run (request timeout, instance crash).

      Runbook: ${local.runbook.api_5xx}
    EOT
    links {
      display_name = "Runbook: API 5xx rate"
      url          = local.runbook.api_5xx
    }
  }

  conditions {
    display_name = "5xx / all requests of txfence-api > ${var.alert_thresholds.api_5xx_ratio}"
    condition_threshold {
      filter             = "resource.type = \"cloud_run_revision\" AND resource.label.service_name = \"${local.functions.api.service}\" AND metric.type = \"run.googleapis.com/request_count\" AND metric.label.response_code_class = \"5xx\""
      denominator_filter = "resource.type = \"cloud_run_revision\" AND resource.label.service_name = \"${local.functions.api.service}\" AND metric.type = \"run.googleapis.com/request_count\""
      comparison         = "COMPARISON_GT"
      threshold_value    = var.alert_thresholds.api_5xx_ratio
      duration           = "0s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
      }
      denominator_aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "sql_cpu" {
  display_name          = "txfence: Cloud SQL CPU high"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: Cloud SQL CPU above ${var.alert_thresholds.sql_cpu * 100}% for 10 minutes"
    mime_type = "text/markdown"
    content   = <<-EOT
      The CPU of a Cloud SQL instance of txfence (${local.sql_instances_text}),
      the only authority of its signers, has been above
      ${var.alert_thresholds.sql_cpu} for 10 minutes. Every lease,
      allocation and receipt write goes through it: latencies and lease
      losses (fenced writes) follow.

      Runbook: ${local.runbook.sql_cpu}
    EOT
    links {
      display_name = "Runbook: Cloud SQL CPU high"
      url          = local.runbook.sql_cpu
    }
  }

  # One condition per instance (shard).
  dynamic "conditions" {
    for_each = local.shard_keys
    content {
      display_name = local.sharded ? "${local.db_instances[conditions.value].name}: cpu/utilization > ${var.alert_thresholds.sql_cpu}" : "cpu/utilization > ${var.alert_thresholds.sql_cpu}"
      condition_threshold {
        filter          = "resource.type = \"cloudsql_database\" AND resource.label.database_id = \"${local.sql_database_ids[conditions.value]}\" AND metric.type = \"cloudsql.googleapis.com/database/cpu/utilization\""
        comparison      = "COMPARISON_GT"
        threshold_value = var.alert_thresholds.sql_cpu
        duration        = "600s"

        aggregations {
          alignment_period   = "60s"
          per_series_aligner = "ALIGN_MEAN"
        }
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "sql_connections" {
  display_name          = "txfence: Cloud SQL connections near the limit"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: Cloud SQL connections above ${var.alert_thresholds.sql_connections_ratio * 100}% of max_connections"
    mime_type = "text/markdown"
    content   = <<-EOT
      Connections to a Cloud SQL instance of txfence (${local.sql_instances_text};
      all databases) are above ${var.alert_thresholds.sql_connections_ratio}
      of its max_connections. At the limit new connections are refused and
      the functions answer 503 / retry. The pools are sized so that every
      function at its maximum instance count fits under this threshold
      (${local.db_pool_peak + local.db_connections_reserved} connections at
      most, ${local.db_connection_budget} during a rollout); more means a
      rollout of several services at once, a pool or instance limit raised,
      or something else connecting.

      Runbook: ${local.runbook.sql_connections}
    EOT
    links {
      display_name = "Runbook: Cloud SQL connections near the limit"
      url          = local.runbook.sql_connections
    }
  }

  # One condition per instance (shard), each against its own max_connections.
  dynamic "conditions" {
    for_each = local.shard_keys
    content {
      display_name = "${local.sharded ? "${local.db_instances[conditions.value].name}: " : ""}postgresql/num_backends > ${var.alert_thresholds.sql_connections_ratio} x ${local.db_instances[conditions.value].max_connections}"
      condition_threshold {
        filter          = "resource.type = \"cloudsql_database\" AND resource.label.database_id = \"${local.sql_database_ids[conditions.value]}\" AND metric.type = \"cloudsql.googleapis.com/database/postgresql/num_backends\""
        comparison      = "COMPARISON_GT"
        threshold_value = floor(var.alert_thresholds.sql_connections_ratio * local.db_instances[conditions.value].max_connections)
        duration        = "300s"

        aggregations {
          alignment_period     = "60s"
          per_series_aligner   = "ALIGN_MEAN"
          cross_series_reducer = "REDUCE_SUM"
        }
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "lease_takeovers" {
  display_name          = "txfence: lease take-overs churning"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: more than ${var.alert_thresholds.lease_takeovers} lease take-overs in 10 minutes"
    mime_type = "text/markdown"
    content   = <<-EOT
      Leases were taken over after their holder let them expire
      (`lease_acquire_total{result="taken_over"}`). One now and then is an
      instance that was stopped mid-work; many mean instances die or stall
      past TXFENCE_LEASE_DURATION regularly (request timeouts, CPU
      starvation, crashes), and each take-over costs a fenced writer its work.

      Runbook: ${local.runbook.lease_takeovers}
    EOT
    links {
      display_name = "Runbook: lease take-overs churning"
      url          = local.runbook.lease_takeovers
    }
  }

  conditions {
    display_name = "lease_acquire_total{result=taken_over} increase over 10m > ${var.alert_thresholds.lease_takeovers}"
    condition_prometheus_query_language {
      query                     = "sum(increase(workload_googleapis_com:lease_acquire_total{result=\"taken_over\"}[10m])) > ${var.alert_thresholds.lease_takeovers}"
      duration                  = "0s"
      evaluation_interval       = "60s"
      disable_metric_validation = true
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

# A sweep that stopped succeeding: its Cloud Scheduler job paused, failing
# to call it (IAM, a deleted service), or every run answering an error or
# timing out. Cloud Run's request counts exist from the first minute, so
# these are created on the first apply; a metric-absence condition only
# fires once the metric had data since the policy was created, so a fresh
# project does not page before its first successful run. The figures the
# sweeps write themselves (pending_oldest_age_seconds by ResubmitSweep,
# outbox_oldest_age_seconds by OutboxSweep) cannot tell this: they stop
# with the sweep.
resource "google_monitoring_alert_policy" "sweep" {
  for_each = local.schedules

  display_name          = "txfence: ${local.functions[each.key].target} not succeeding"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: ${local.functions[each.key].target} has not completed a run for 10 minutes, or most of its runs fail"
    mime_type = "text/markdown"
    content   = <<-EOT
      ${local.functions[each.key].service} (${local.functions[each.key].target}), called by the Cloud
      Scheduler job ${each.value.name} every minute, answered no 2xx for
      10 minutes, or more than half of its answers over 30 minutes were
      5xx. ${local.sweep_duty[each.key]}

      Runbook: ${local.runbook.sweep}
    EOT
    links {
      display_name = "Runbook: a sweep not succeeding"
      url          = local.runbook.sweep
    }
  }

  conditions {
    display_name = "no 2xx answer of ${local.functions[each.key].service} for 10 minutes"
    condition_absent {
      filter   = "resource.type = \"cloud_run_revision\" AND resource.label.service_name = \"${local.functions[each.key].service}\" AND metric.type = \"run.googleapis.com/request_count\" AND metric.label.response_code_class = \"2xx\""
      duration = "600s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  conditions {
    display_name = "5xx / all answers of ${local.functions[each.key].service} > 0.5 over 30 minutes"
    condition_threshold {
      filter             = "resource.type = \"cloud_run_revision\" AND resource.label.service_name = \"${local.functions[each.key].service}\" AND metric.type = \"run.googleapis.com/request_count\" AND metric.label.response_code_class = \"5xx\""
      denominator_filter = "resource.type = \"cloud_run_revision\" AND resource.label.service_name = \"${local.functions[each.key].service}\" AND metric.type = \"run.googleapis.com/request_count\""
      comparison         = "COMPARISON_GT"
      threshold_value    = 0.5
      duration           = "0s"

      aggregations {
        alignment_period     = "1800s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
      }
      denominator_aggregations {
        alignment_period     = "1800s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

# txfence's own figures stopped arriving: the OutboxSweep writes
# outbox_oldest_age_seconds after every run, 0 when nothing waits, so its
# absence means either that sweep is not running (its own alert says so
# too) or export to Cloud Monitoring is broken, and then every alert on
# txfence's metrics above is blind. A metric-filter condition on a workload
# metric: only with var.workload_metric_alerts (see the top of this file).
resource "google_monitoring_alert_policy" "metrics_absent" {
  count = var.workload_metric_alerts ? 1 : 0

  display_name          = "txfence: metrics not arriving"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = local.monitoring_labels

  documentation {
    subject   = "txfence: no outbox figures for 20 minutes: the OutboxSweep is not running or metrics are not exported"
    mime_type = "text/markdown"
    content   = <<-EOT
      No value of `outbox_oldest_age_seconds` arrived for 20 minutes. The
      OutboxSweep writes it after every run (0 when nothing waits), so
      either it does not run, or txfence's metrics do not reach Cloud
      Monitoring (the runtime service accounts' roles/monitoring.metricWriter,
      TXFENCE_TELEMETRY, the exporter's errors in the logs); in that case
      the alerts on txfence's own metrics cannot fire.

      Runbook: ${local.runbook.metrics_absent}
    EOT
    links {
      display_name = "Runbook: txfence metrics not arriving"
      url          = local.runbook.metrics_absent
    }
  }

  conditions {
    display_name = "no outbox_oldest_age_seconds for 20 minutes"
    condition_absent {
      filter   = "resource.type = \"generic_task\" AND metric.type = \"workload.googleapis.com/outbox_oldest_age_seconds\""
      duration = "1200s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_MAX"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [google_project_service.apis]
}

locals {
  # What each sweep's silence costs, for its alert's documentation.
  sweep_duty = {
    finality = "Nothing reaches CONFIRMED or FAILED_FINAL meanwhile: confirmations, reorg handling and outcomes (the completion feed and topic) wait, and receipts Receipt missed are not picked up."
    outbox   = "Outbox rows their writers did not publish wait: prompts (so broadcasts and receipt checks) and completion messages are late."
    resubmit = "Fee bumps, rebroadcasts, re-prompts of stranded work, STUCK detection and resolution, and admin actions wait; the pending-age figures it writes stop too, so \"pending transactions too old\" cannot fire."
  }

  # Every alert policy, by name: the alert_policies output and the plan
  # tests (tests/alerts.tftest.hcl) read this map, so a policy must be
  # listed here (terraform_test.go checks that each one is).
  alert_policies = merge(
    {
      fenced_writes   = google_monitoring_alert_policy.fenced_writes
      pending_age     = google_monitoring_alert_policy.pending_age
      delegated       = google_monitoring_alert_policy.delegated
      endpoint        = google_monitoring_alert_policy.endpoint
      no_endpoint     = google_monitoring_alert_policy.no_endpoint
      outbox          = google_monitoring_alert_policy.outbox
      stuck           = google_monitoring_alert_policy.stuck
      contradicted    = google_monitoring_alert_policy.contradicted
      dead_letters    = google_monitoring_alert_policy.dead_letters
      api_5xx         = google_monitoring_alert_policy.api_5xx
      sql_cpu         = google_monitoring_alert_policy.sql_cpu
      sql_connections = google_monitoring_alert_policy.sql_connections
      lease_takeovers = google_monitoring_alert_policy.lease_takeovers
    },
    { for k, p in google_monitoring_alert_policy.sweep : "sweep_${k}" => p },
    { for p in google_monitoring_alert_policy.metrics_absent : "metrics_absent" => p },
  )
}

# The operators' dashboard: the signers' pipeline, latencies, what is stuck
# or fenced, and the database.
locals {
  # A line chart tile of the mosaic layout; queries are PromQL (txfence's
  # metrics and Google's alike), so one shape serves every chart.
  dashboard_tiles = [
    {
      title = "Pipeline: created, broadcast, mined, final (per minute)"
      queries = {
        created   = "sum(rate(workload_googleapis_com:tx_create_total{result=\"created\"}[5m])) * 60"
        broadcast = "sum(rate(workload_googleapis_com:tx_submit_total{result=\"accepted\"}[5m])) * 60"
        mined     = "sum(rate(workload_googleapis_com:receipt_check_total{result=\"mined\"}[5m])) * 60"
        final     = "sum(rate(workload_googleapis_com:confirmation_lag_seconds_count[5m])) * 60"
      }
    },
    {
      title = "Create refusals and failures (per minute)"
      queries = {
        by_result = "sum by (result) (rate(workload_googleapis_com:tx_create_total{result!=\"created\",result!=\"replayed\"}[5m])) * 60"
        refused   = "sum by (outcome) (rate(workload_googleapis_com:api_refused_total[5m])) * 60"
      }
    },
    {
      title = "Allocation latency (s): p50, p95, p99"
      queries = {
        p50 = "histogram_quantile(0.5, sum by (le) (rate(workload_googleapis_com:allocation_latency_seconds_bucket[5m])))"
        p95 = "histogram_quantile(0.95, sum by (le) (rate(workload_googleapis_com:allocation_latency_seconds_bucket[5m])))"
        p99 = "histogram_quantile(0.99, sum by (le) (rate(workload_googleapis_com:allocation_latency_seconds_bucket[5m])))"
      }
    },
    {
      title = "Broadcast latency (s): p50, p95, p99"
      queries = {
        p50 = "histogram_quantile(0.5, sum by (le) (rate(workload_googleapis_com:broadcast_latency_seconds_bucket[5m])))"
        p95 = "histogram_quantile(0.95, sum by (le) (rate(workload_googleapis_com:broadcast_latency_seconds_bucket[5m])))"
        p99 = "histogram_quantile(0.99, sum by (le) (rate(workload_googleapis_com:broadcast_latency_seconds_bucket[5m])))"
      }
    },
    {
      title = "Stage latency p95 (s): create call, submit wait, receipt wait"
      queries = {
        create  = "histogram_quantile(0.95, sum by (le) (rate(workload_googleapis_com:create_latency_seconds_bucket{result=\"created\"}[5m])))"
        submit  = "histogram_quantile(0.95, sum by (le) (rate(workload_googleapis_com:submit_latency_seconds_bucket[5m])))"
        receipt = "histogram_quantile(0.95, sum by (le) (rate(workload_googleapis_com:receipt_latency_seconds_bucket[5m])))"
      }
    },
    {
      title = "Time to a final outcome (s): p50, p95, p99"
      queries = {
        p50 = "histogram_quantile(0.5, sum by (le) (rate(workload_googleapis_com:confirmation_lag_seconds_bucket[15m])))"
        p95 = "histogram_quantile(0.95, sum by (le) (rate(workload_googleapis_com:confirmation_lag_seconds_bucket[15m])))"
        p99 = "histogram_quantile(0.99, sum by (le) (rate(workload_googleapis_com:confirmation_lag_seconds_bucket[15m])))"
      }
    },
    {
      title = "API requests by status class (per second)"
      queries = {
        by_class = "sum by (response_code_class) (rate(run_googleapis_com:request_count{monitored_resource=\"cloud_run_revision\",service_name=\"${local.functions.api.service}\"}[5m]))"
      }
    },
    {
      title = "Oldest pending transaction by signer (s)"
      queries = {
        by_signer = "max by (chain_id, signer) (workload_googleapis_com:pending_oldest_age_seconds)"
      }
    },
    {
      # Each sweep instance reports the same outbox: the highest, not the sum.
      title = "Outbox: rows waiting to be published, failing, oldest (s)"
      queries = {
        waiting = "max by (shard) (workload_googleapis_com:outbox_backlog_rows)"
        failing = "max by (shard) (workload_googleapis_com:outbox_failing_rows)"
        oldest  = "max by (shard) (workload_googleapis_com:outbox_oldest_age_seconds)"
      }
    },
    {
      title = "Entered STUCK, by reason (per 30 minutes)"
      queries = {
        by_reason = "sum by (reason) (increase(workload_googleapis_com:stuck_total[30m]))"
      }
    },
    {
      title = "Fenced writes by operation, lease take-overs (per 10 minutes)"
      queries = {
        fenced     = "sum by (op) (increase(workload_googleapis_com:lease_fenced_total[10m]))"
        taken_over = "sum(increase(workload_googleapis_com:lease_acquire_total{result=\"taken_over\"}[10m]))"
      }
    },
    {
      title = "Reorgs, rebroadcasts, writer queue depth"
      queries = {
        reorgs       = "sum(increase(workload_googleapis_com:reorg_total[10m]))"
        rebroadcasts = "sum(increase(workload_googleapis_com:resubmit_total{result=\"rebroadcast\"}[10m]))"
        queue_depth  = "sum(workload_googleapis_com:writer_queue_depth)"
      }
    },
    {
      title = "Cloud SQL: CPU and memory utilization"
      queries = {
        cpu    = "max by (database_id) (cloudsql_googleapis_com:database_cpu_utilization{database_id=~\"${local.sql_database_ids_re}\"})"
        memory = "max by (database_id) (cloudsql_googleapis_com:database_memory_utilization{database_id=~\"${local.sql_database_ids_re}\"})"
      }
    },
    {
      title = "Cloud SQL: connections by instance (max_connections ${join(", ", distinct([for k in local.shard_keys : tostring(local.db_instances[k].max_connections)]))})"
      queries = {
        connections = "sum by (database_id) (cloudsql_googleapis_com:database_postgresql_num_backends{database_id=~\"${local.sql_database_ids_re}\"})"
      }
    },
    {
      title = "Pub/Sub: undelivered prompts and dead letters"
      queries = {
        undelivered = "sum by (subscription_id) (pubsub_googleapis_com:subscription_num_undelivered_messages{subscription_id=~\"txfence-.*\"})"
      }
    },
  ]
}

resource "google_monitoring_dashboard" "txfence" {
  dashboard_json = jsonencode({
    displayName = "txfence"
    labels      = { txfence = "" }
    mosaicLayout = {
      columns = 48
      tiles = [
        for i, tile in local.dashboard_tiles : {
          xPos   = (i % 2) * 24
          yPos   = floor(i / 2) * 16
          width  = 24
          height = 16
          widget = {
            title = tile.title
            xyChart = {
              chartOptions = { mode = "COLOR" }
              dataSets = [
                for name, q in tile.queries : {
                  plotType        = "LINE"
                  targetAxis      = "Y1"
                  legendTemplate  = name
                  timeSeriesQuery = { prometheusQuery = q }
                }
              ]
            }
          }
        }
      ]
    }
  })

  depends_on = [google_project_service.apis]
}
