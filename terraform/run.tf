# Cloud Run: one service per function, all from the same image
# (functions/Dockerfile; FUNCTION_TARGET selects the function, served at /),
# and the migration job.
#
# Ingress and authentication:
#   api      ingress "internal and Cloud Load Balancing": reachable through
#            the external HTTPS load balancer (lb.tf: Cloud Armor, /v1/ only)
#            and from inside the project, never at its run.app URL from the
#            internet (unless api_direct_ingress without a load balancer:
#            then the run.app URL is open to IAM-authenticated callers, as
#            allUsers is never granted without the load balancer). Invokers: exactly
#            api_invoker_members, empty by default. txfence itself then
#            authenticates every call (TXFENCE_AUTH=oidc,apikey).
#   others   ingress "internal": Pub/Sub push and Cloud Scheduler of the same
#            project count as internal, nothing from the internet does. No
#            public invoker: only the pusher service account's OIDC tokens are
#            accepted.
#
# Secrets (secrets.tf) are named in TXFENCE_SECRETS and read from Secret
# Manager by each process when it loads its configuration; the environment
# is local.function_env (main.tf). Every service and the job
# reach Cloud SQL's private IP through Direct VPC egress (network.tf).
#
# Image rollouts after the first apply are done by Cloud Build
# (cloudbuild.yaml: gcloud run services update --image), so terraform ignores
# the image and the client fields gcloud sets; everything else (environment,
# scaling, identity) stays terraform's.

resource "google_cloud_run_v2_service" "fn" {
  for_each = local.functions

  name        = each.value.service
  location    = var.region
  description = each.value.description

  ingress = (
    each.key != "api" ? "INGRESS_TRAFFIC_INTERNAL_ONLY"
    : var.api_direct_ingress && !local.lb_enabled ? "INGRESS_TRAFFIC_ALL"
    : "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"
  )

  # IAM-authenticated API callers through the load balancer use the public
  # URL as their ID tokens' audience, the same one txfence checks
  # (TXFENCE_OIDC_AUDIENCE).
  custom_audiences = each.key == "api" && local.lb_enabled ? [local.api_url] : null

  deletion_protection = var.run_deletion_protection

  labels = {
    function = each.key
  }

  template {
    service_account = google_service_account.runtime[each.key].email
    timeout         = "${each.value.timeout}s"

    max_instance_request_concurrency = each.value.concurrency

    # Second generation: full Linux compatibility and faster networking.
    execution_environment = "EXECUTION_ENVIRONMENT_GEN2"

    # Direct VPC egress to Cloud SQL's private IP (network.tf).
    vpc_access {
      egress = local.vpc_egress.egress
      network_interfaces {
        network    = local.vpc_egress.network
        subnetwork = local.vpc_egress.subnetwork
      }
    }

    scaling {
      min_instance_count = local.min_instances[each.key]
      max_instance_count = local.max_instances[each.key]
    }

    containers {
      image = var.image

      resources {
        limits = {
          cpu    = each.value.cpu
          memory = each.value.memory
        }
        # CPU only during requests: no goroutine outlives its request
        # (docs/architecture.md), so nothing runs between them.
        cpu_idle          = true
        startup_cpu_boost = true
      }

      dynamic "env" {
        for_each = local.function_env[each.key]
        content {
          name  = env.key
          value = env.value
        }
      }

      # Submit and Receipt scale from zero on a push, behind Direct VPC
      # egress, whose first connections may take a minute or more: an
      # instance gets pushes only once its databases answer (GET /ready,
      # functions/internal/ready; database settings only, so a first
      # deploy passes before the schema exists). Up to 4 minutes, Cloud
      # Run's limit. The sweeps get none: any request runs a sweep, and
      # the next minute's call retries anyway.
      dynamic "startup_probe" {
        for_each = each.value.trigger == "push" ? [1] : []
        content {
          period_seconds    = 10
          timeout_seconds   = 5
          failure_threshold = 24
          http_get {
            path = "/ready"
          }
        }
      }
    }
  }

  lifecycle {
    ignore_changes = [
      template[0].containers[0].image,
      client,
      client_version,
    ]
  }

  # The grants come first, so that the first load of the configuration can
  # read the secrets TXFENCE_SECRETS names (whose versions may come later:
  # secrets.tf), and the versions terraform writes itself, so that it does
  # not fail for want of one.
  depends_on = [
    google_project_service.apis,
    google_project_iam_member.sql,
    google_project_iam_member.telemetry,
    google_sql_user.runtime,
    google_sql_database.txfence,
    google_secret_manager_secret_iam_member.accessor,
    google_secret_manager_secret_version.chains,
    google_secret_manager_secret_version.stuck_webhook,
  ]
}

# The pusher may invoke the functions it triggers: Submit and Receipt (Pub/Sub
# push), FinalitySweep, OutboxSweep and ResubmitSweep (Cloud Scheduler). Not
# the API.
resource "google_cloud_run_v2_service_iam_member" "pusher_invokes" {
  for_each = { for k, f in local.functions : k => f if f.trigger != "http" }

  project  = var.project
  location = var.region
  name     = google_cloud_run_v2_service.fn[each.key].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.pusher.email}"
}

# API invokers: exactly api_invoker_members (empty by default: nobody), and
# the operator service account (iam.tf). allUsers is only ever granted when
# the load balancer (and its Cloud Armor policy) is the way in; then the
# run.app URL is closed by the ingress setting.
locals {
  api_invokers = toset([
    for m in var.api_invoker_members : m
    if local.lb_enabled || !contains(["allUsers", "allAuthenticatedUsers"], m)
  ])
}

resource "google_cloud_run_v2_service_iam_member" "api_invokers" {
  for_each = local.api_invokers

  project  = var.project
  location = var.region
  name     = google_cloud_run_v2_service.fn["api"].name
  role     = "roles/run.invoker"
  member   = each.value
}

# Schema migrations (goose up, embedded in the image as /migrate). Run as a
# job after every image build and before the services are updated
# (cloudbuild.yaml), never from a function. Roll back by hand with
#   gcloud run jobs execute txfence-migrate --region REGION --args=down-to,N --wait
resource "google_cloud_run_v2_job" "migrate" {
  name     = "txfence-migrate"
  location = var.region

  deletion_protection = var.run_deletion_protection

  template {
    task_count  = 1
    parallelism = 1

    template {
      service_account = google_service_account.runtime["migrate"].email
      timeout         = "900s" # the command gives itself 10 minutes
      max_retries     = 0      # a failed migration wants a human, not a retry

      vpc_access {
        egress = local.vpc_egress.egress
        network_interfaces {
          network    = local.vpc_egress.network
          subnetwork = local.vpc_egress.subnetwork
        }
      }

      containers {
        image   = var.image
        command = ["/migrate"]
        args    = ["up"]

        resources {
          limits = {
            cpu    = "1"
            memory = "512Mi"
          }
        }

        dynamic "env" {
          for_each = local.migrate_env
          content {
            name  = env.key
            value = env.value
          }
        }
      }
    }
  }

  lifecycle {
    ignore_changes = [
      template[0].template[0].containers[0].image,
      client,
      client_version,
    ]
  }

  depends_on = [
    google_project_service.apis,
    google_project_iam_member.sql,
    google_sql_user.runtime,
    google_sql_database.txfence,
  ]
}

resource "google_cloud_run_v2_service_iam_member" "api_operator" {
  project  = var.project
  location = var.region
  name     = google_cloud_run_v2_service.fn["api"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.operator.email}"
}

# The admin job: the first admin (functions/admin bootstrap). Run once after
# the first migration (docs/deploy.md):
#   gcloud run jobs execute txfence-admin --region REGION --wait
# It makes first_admin_principal (the operator service account by default)
# admin of every signer and writes its API key to the secret
# txfence-first-admin-key, never to its output, which Cloud Logging keeps.
# Running it again changes nothing while that principal has a key. Other
# admin commands run with the same job (--args), e.g.
#   gcloud run jobs execute txfence-admin --region REGION --wait --args=audit,list,--limit,20
# but never apikey create without --secret: the key would be in the logs.
locals {
  first_admin_principal = var.first_admin_principal != "" ? var.first_admin_principal : google_service_account.operator.email

  admin_env = merge(
    local.common_env,
    local.db_env["admin"],
    {
      TXFENCE_DB_MAX_CONNS = "2"
      # The actor its audit rows name (cli:txfence-admin-job).
      USER = "txfence-admin-job"
    },
    var.extra_env,
  )
}

resource "google_cloud_run_v2_job" "admin" {
  name     = "txfence-admin"
  location = var.region

  deletion_protection = var.run_deletion_protection

  template {
    task_count  = 1
    parallelism = 1

    template {
      service_account = google_service_account.runtime["admin"].email
      timeout         = "300s" # the command gives itself 2 minutes
      max_retries     = 0      # a rerun changes nothing; a failure wants a look

      vpc_access {
        egress = local.vpc_egress.egress
        network_interfaces {
          network    = local.vpc_egress.network
          subnetwork = local.vpc_egress.subnetwork
        }
      }

      containers {
        image   = var.image
        command = ["/admin"]
        args    = ["bootstrap", "--principal", local.first_admin_principal, "--secret", google_secret_manager_secret.first_admin.id]

        resources {
          limits = {
            cpu    = "1"
            memory = "512Mi"
          }
        }

        dynamic "env" {
          for_each = local.admin_env
          content {
            name  = env.key
            value = env.value
          }
        }
      }
    }
  }

  lifecycle {
    ignore_changes = [
      template[0].template[0].containers[0].image,
      client,
      client_version,
    ]
  }

  depends_on = [
    google_project_service.apis,
    google_project_iam_member.sql,
    google_sql_user.runtime,
    google_sql_database.txfence,
    google_secret_manager_secret_iam_member.first_admin_writer,
  ]
}

# An API nobody may invoke is the default, on purpose; say so at plan time.
check "api_has_invokers" {
  assert {
    condition     = length(local.api_invokers) > 0
    error_message = "api_invoker_members is empty (or holds only allUsers without api_domain): nobody can call the API. Set it to [\"allUsers\"] behind the load balancer (txfence authenticates callers itself) or to the callers' identities."
  }
}
