"""The public names of the stack's modules (STYLE 8: `__all__` is the API)."""
from __future__ import annotations

import importlib

import pytest

API = {
    "gateway": ["HTTP2_DIRECTIVE_SINCE", "SECRET_FILES", "TEMPLATE_DIR", "TEMPLATES", "UPSTREAM_RESOLVE_SINCE",
                "NginxVersion", "UnsetVariable", "for_nginx_version", "installed_nginx_version",
                "parse_nginx_version", "render_template", "render_templates", "template_variables"],
    "gateway.certs": ["DEFAULT_DIR", "DEFAULT_SERVER_NAMES", "ROLES", "DEFAULT_CLIENTS", "ACCESS_DIR",
                      "GRAFANA_PASSWORD_FILE", "Credentials", "CertsError", "init_secrets", "issue_client",
                      "rotate_client", "revoke_client", "edit_key_map", "write_grafana_password", "build_parser",
                      "main"],
    "serving.config": ["load_model_server_config", "load_batching_parameters", "load_monitoring_config",
                       "load_ssl_config", "parse_text_proto"],
    "serving.config.compose": ["ComposeError", "EmbeddedPlan", "COMPOSE_FILES", "LOCAL_OVERRIDE",
                               "GRAFANA_PASSWORD", "with_grafana_placeholder", "read_dotenv", "compose_command",
                               "load_compose_model", "volume_map", "remap_server_args", "service_models_config",
                               "plan_embedded_server"],
    "serving.config.protos": ["batching_parameters_class", "monitoring_config_class", "ssl_config_class"],
    "serving.config.edit": ["VersionPolicy", "parse_labels", "model_entry", "find_entry", "entry_problems",
                            "with_model", "without_model", "add_steps", "remove_steps"],
    "serving.config.reload": ["ReloadError", "Step", "connect", "connect_with", "version_states", "Reloader"],
    "serving.config.served_config": ["SERVING_DIR", "DEFAULT_WORK_DIR", "DEFAULT_MODEL_REPO", "DEFAULT_GRPC",
                             "STATE_FILE", "COMPOSE_PAIR", "StackState", "StateFileError", "read_state",
                             "load_state", "write_state",
                             "ServedConfig", "served_config", "stack_model_repo", "apply_steps",
                             "change_served_config", "with_entry_of"],
    "serving.config.config_lock": ["StaleConfig", "LockTimeout", "Snapshot", "ConfigLock", "read_snapshot"],
    "serving.config.names": ["MODEL_NAME", "MAX_MODEL_NAME_LENGTH", "MODEL_NAME_RULE", "model_name_problem"],
    "serving.config.rollbacks": ["ROLLED_BACK_FILE", "rolled_back_versions", "record_rollback", "reinstate",
                                 "stable_version"],
    "serving.rollout": ["RolloutError", "Step", "plan_label_move", "canary_labels", "promote_labels",
                        "rollback_labels", "served_versions", "connect", "Rollout"],
    "serving.config.files": ["MONITORING_PATH", "BatchingSpec", "model_config_text", "batching_config_text",
                             "monitoring_config_text", "write_config_files"],
    "serving.stack.choice": ["BACKENDS", "Choice", "docker_runtimes", "choose_backend", "compose_files",
                             "compose_profiles"],
    "serving.stack.compose": ["NON_ROOT_ID", "IMAGES", "CONFIG_DIR_VARIABLE", "COMPOSE_CONFIG_DIR", "recorded_env",
                              "ContainerUser", "container_user", "is_local_service",
                              "with_dependencies", "ComposePlan", "plan_compose", "cpu_limits",
                              "missing_local_images", "HostPath", "host_paths", "prepare_host_paths",
                              "missing_gateway_files", "run_compose", "compose_containers", "compose_down"],
    "serving.stack.embedded": ["DEFAULT_EXPORTS", "SERVER_LOG", "EmbeddedOptions", "ensure_commands",
                               "zoo_selection", "export_order", "Exports", "run_embedded"],
    "serving.stack.prepared_configs": ["MODELS_CONFIG", "EMBEDDED_HEADER", "prepare_served_config", "prepare_compose_configs"],
    "serving.stack.scrape": ["SHIPPED_CONFIG", "scrape_config_for", "write_scrape_config"],
    "serving.stack.recorded": ["recorded_stack", "compose_for", "show_logs", "run_service", "show_services"],
    "serving.stack.banner": ["say", "batching_summary", "print_usage", "print_gateway_usage"],
    "serving.stack.down": ["stop_embedded", "stop_stack"],
    "serving.stack.identity": ["ProcessIdentity", "start_time", "die_with_parent"],
    "serving.stack.work_lock": ["LOCK_FILE", "WorkDirBusy", "WorkDirLock"],
    "serving.stack.running": ["embedded_processes", "held_ports", "address_port", "corrupt_state_advice",
                              "describe_running"],
    "serving.stack.cli": ["build_parser", "main"],
    "serving.stack.endpoint": ["GATEWAY_LIMIT_MESSAGE", "StackEndpoint", "is_gateway_refusal", "stack_endpoint"],
}


@pytest.mark.parametrize("module", sorted(API))
def test_all_is_pinned(module):
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(API[module])
    assert all(hasattr(mod, name) for name in mod.__all__)
