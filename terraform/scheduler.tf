# Cloud Scheduler: the sweeps. Each job POSTs to its service with an OIDC
# token of the pusher service account (audience = the service URL), which
# Cloud Run checks against roles/run.invoker.
#
# FinalitySweep runs every minute and keeps sweeping for ~65s inside the
# invocation (TXFENCE_FINALITY_BUDGET), so the chain is looked at every few
# seconds with one invocation a minute, and the next minute's run starts
# before this one ends (no gap; per-signer chain leases keep them apart). OutboxSweep runs every minute too:
# it is the safety net for outbox rows whose writer crashed between commit
# and publish, and it exits at once when there is nothing to send.
#
# No retries: the next minute's run does the same work, and a retry would
# overlap it.

locals {
  schedules = {
    finality = {
      name     = "txfence-finality-sweep"
      schedule = "* * * * *"
      # Longer than the service timeout (120s), so Cloud Run, not
      # Scheduler, bounds a run.
      deadline = "150s"
    }
    outbox = {
      name     = "txfence-outbox-sweep"
      schedule = "* * * * *"
      deadline = "120s"
    }
    resubmit = {
      name     = "txfence-resubmit-sweep"
      schedule = "* * * * *"
      deadline = "150s"
    }
  }
}

resource "google_cloud_scheduler_job" "sweep" {
  for_each = local.schedules

  name             = each.value.name
  description      = "Calls ${local.functions[each.key].target} (${local.functions[each.key].service})."
  region           = coalesce(var.scheduler_region, var.region)
  schedule         = each.value.schedule
  time_zone        = "Etc/UTC"
  attempt_deadline = each.value.deadline

  retry_config {
    retry_count = 0
  }

  http_target {
    http_method = "POST"
    uri         = google_cloud_run_v2_service.fn[each.key].uri

    oidc_token {
      service_account_email = google_service_account.pusher.email
      audience              = google_cloud_run_v2_service.fn[each.key].uri
    }
  }

  lifecycle {
    # A run may last up to its service's timeout, longer than the minute
    # between runs (FinalitySweep's budget alone is 65s), so the next run
    # needs room of its own, or Cloud Run refuses it (429) and the sweep
    # skips a minute.
    precondition {
      condition     = local.max_instances[each.key] * local.functions[each.key].concurrency >= 2
      error_message = "${local.functions[each.key].target} runs every minute for up to ${local.functions[each.key].timeout}s: it needs room for two runs at once (max_instances.${each.key} x concurrency ${local.functions[each.key].concurrency} >= 2)."
    }
  }

  depends_on = [
    google_project_service.apis,
    google_cloud_run_v2_service_iam_member.pusher_invokes,
  ]
}
