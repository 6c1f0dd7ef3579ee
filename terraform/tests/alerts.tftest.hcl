# The google provider, mocked: no credentials, no project. Computed
# attributes that the provider checks or the module parses get realistic
# values (OpenTofu fills computed attributes at plan time and runs the
# provider's validation on them). OpenTofu has no shared mock files, so every
# file of tests/ repeats this block.
mock_provider "google" {
  mock_resource "google_service_account" {
    defaults = {
      name   = "projects/p/serviceAccounts/txfence-mock@p.iam.gserviceaccount.com"
      email  = "txfence-mock@p.iam.gserviceaccount.com"
      member = "serviceAccount:txfence-mock@p.iam.gserviceaccount.com"
    }
  }
  mock_resource "google_compute_network" {
    defaults = {
      id        = "projects/p/global/networks/txfence"
      self_link = "https://www.googleapis.com/compute/v1/projects/p/global/networks/txfence"
    }
  }
  mock_resource "google_compute_subnetwork" {
    defaults = {
      id = "projects/p/regions/us-central1/subnetworks/txfence-run"
    }
  }
  mock_resource "google_secret_manager_secret" {
    defaults = {
      id   = "projects/p/secrets/txfence-chains"
      name = "projects/123/secrets/txfence-chains"
    }
  }
  mock_resource "google_pubsub_topic" {
    defaults = {
      id = "projects/p/topics/txfence-submit"
    }
  }
  mock_resource "google_cloud_run_v2_service" {
    defaults = {
      uri = "https://txfence-x-123.us-central1.run.app"
    }
  }
  mock_resource "google_sql_database_instance" {
    defaults = {
      connection_name    = "p:us-central1:txfence"
      private_ip_address = "10.1.0.3"
    }
  }
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
}

variables {
  project             = "p"
  image               = "us-central1-docker.pkg.dev/p/txfence/txfence:abc1234"
  api_invoker_members = ["serviceAccount:caller@p.iam.gserviceaccount.com"]
}

# The first apply of a fresh project: no condition may name a metric that
# does not exist yet. Cloud Monitoring refuses metric-filter and MQL
# conditions on a workload.googleapis.com metric never written (404 "Cannot
# find metric(s)"); PromQL conditions on them are created only with
# disable_metric_validation.
run "first_apply_names_no_late_metric" {
  command = plan

  variables {
    workload_metric_alerts = false
  }

  assert {
    condition = alltrue(flatten([
      for name, p in local.alert_policies : [
        for c in p.conditions : [
          for f in concat(
            [for b in c.condition_threshold : b.filter],
            [for b in c.condition_threshold : b.denominator_filter if b.denominator_filter != null],
            [for b in c.condition_absent : b.filter],
            [for b in c.condition_monitoring_query_language : b.query],
          ) : !strcontains(f, "workload.googleapis.com")
        ]
      ]
    ]))
    error_message = "An alert condition on the first apply names a txfence (workload.googleapis.com) metric in a filter or MQL query: Cloud Monitoring refuses it until the metric exists. Use PromQL with disable_metric_validation, a metric that exists from the first minute, or put the policy behind var.workload_metric_alerts."
  }

  assert {
    condition = alltrue(flatten([
      for name, p in local.alert_policies : [
        for c in p.conditions : [
          for b in c.condition_prometheus_query_language :
          !strcontains(b.query, "workload_googleapis_com") || b.disable_metric_validation == true
        ]
      ]
    ]))
    error_message = "A PromQL condition on a txfence metric lacks disable_metric_validation = true: it fails to create before the metric is first written."
  }

  assert {
    condition     = !contains(keys(local.alert_policies), "metrics_absent")
    error_message = "The metrics-absence alert exists before workload_metric_alerts is turned on."
  }
}

# Every sweep has an alert that fires when it stops succeeding, on Cloud
# Run's own request counts (they exist from the first minute).
run "every_sweep_has_a_failure_alert" {
  command = plan

  assert {
    condition     = toset([for k, f in local.functions : k if f.trigger == "schedule"]) == toset(keys(google_monitoring_alert_policy.sweep))
    error_message = "Every scheduled function (FinalitySweep, OutboxSweep, ResubmitSweep) needs its \"not succeeding\" alert."
  }

  assert {
    condition = alltrue([
      for k, p in google_monitoring_alert_policy.sweep : anytrue([
        for c in p.conditions : anytrue([
          for b in c.condition_absent :
          strcontains(b.filter, "run.googleapis.com/request_count") && strcontains(b.filter, "\"${local.functions[k].service}\"") && strcontains(b.filter, "2xx")
        ])
      ])
    ])
    error_message = "Each sweep's alert has an absence condition on its own service's 2xx request count."
  }

  assert {
    condition     = length(setsubtract(["sweep_finality", "sweep_resubmit", "sweep_outbox"], keys(output.alert_policies))) == 0
    error_message = "The alert_policies output lists the sweep alerts."
  }
}

# Once the metrics exist, the absence alert on them is created.
run "metric_alerts_turned_on" {
  command = plan

  variables {
    workload_metric_alerts = true
  }

  assert {
    condition     = length(google_monitoring_alert_policy.metrics_absent) == 1
    error_message = "workload_metric_alerts = true creates the metrics-absence alert."
  }

  assert {
    condition     = strcontains(google_monitoring_alert_policy.metrics_absent[0].conditions[0].condition_absent[0].filter, "workload.googleapis.com/outbox_oldest_age_seconds")
    error_message = "The metrics-absence alert watches outbox_oldest_age_seconds, which the OutboxSweep writes every minute."
  }
}
