"""Dynamic broker configs (KIP-226): broker keys that AlterConfigs / IncrementalAlterConfigs may
change at run time, per broker (resource name = node id) or as the cluster-wide default (resource
name ""). They are kept in the metadata store, survive restarts, and are applied at once to
every log whose topic does not override them.

The broker's ``config.explicit`` is a live `BrokerProperties` view (dynamic per-broker over
dynamic default over the config file), so every LogConfig built from it sees the current values.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from broker.config import KEYS, BrokerConfig
from broker.store.local_store import LocalMetadataStore
from storage.log_config import (
    DYNAMIC_BROKER_CONFIGS,
    PER_BROKER_ONLY,
    BrokerProperties,
    LogConfig,
    topic_broker_defaults,
    unused_broker_defaults,
    validate_broker_config,
)

log = logging.getLogger(__name__)
DEFAULT_SCOPE = ""


# Keys whose Kafka default is null (their synonym of lower precedence decides): no DEFAULT_CONFIG
# synonym is listed for them, as in Kafka.
_NULL_DEFAULTS = frozenset({
    "log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.roll.jitter.ms", "log.flush.interval.ms",
})


def _defaults() -> dict[str, object]:
    """Kafka's value of every broker key nobody set (its staticDefaultConfigs)."""
    defaults: dict[str, object] = dict(topic_broker_defaults())
    defaults |= {key: spec.default for key, spec in KEYS.items()}
    defaults |= unused_broker_defaults()
    return {key: value for key, value in defaults.items() if key not in _NULL_DEFAULTS}


def _scope_label(scope: str) -> str:
    return "cluster-wide default" if scope == DEFAULT_SCOPE else f"broker {scope}"


class DynamicBrokerConfigs:
    def __init__(self, config: BrokerConfig, store: LocalMetadataStore) -> None:
        self.store = store
        self.broker_scope = str(config.node_id)
        self.properties = BrokerProperties(config.explicit, _defaults())
        self.properties.set_dynamic(self._stored(DEFAULT_SCOPE), self._stored(self.broker_scope))
        self.config = dataclasses.replace(config, explicit=self.properties)
        self.on_change: Callable[[], None] = lambda: None  # the logs take the new values

    def _stored(self, scope: str) -> dict[str, str]:
        stored = self.store.broker_configs(scope)
        unknown = sorted(set(stored) - set(DYNAMIC_BROKER_CONFIGS))
        if unknown:
            log.warning("ignoring stored dynamic configs (%s) that cannot be set dynamically: %s",
                        _scope_label(scope), ", ".join(unknown))
        return {k: v for k, v in stored.items() if k in DYNAMIC_BROKER_CONFIGS}

    def current(self, scope: str) -> dict[str, str]:
        props = self.properties
        return dict(props.dynamic_default if scope == DEFAULT_SCOPE else props.dynamic_broker)

    def check(self, scope: str, configs: dict[str, str]) -> str | None:
        """Kafka's message for a set of dynamic configs it would refuse at ``scope``, else None."""
        # Kafka's DynamicBrokerConfig refuses a config it knows is not dynamic; one it does not
        # know at all (a custom config) passes, and Gregor then has nothing to apply
        refused = sorted((set(configs) & set(KEYS)) - set(DYNAMIC_BROKER_CONFIGS))
        if refused:
            return f"Cannot update these configs dynamically: [{', '.join(refused)}]"
        configs = _dynamic_only(configs)
        broker_only = sorted(set(configs) & PER_BROKER_ONLY) if scope == DEFAULT_SCOPE else []
        if broker_only:
            return ("Cannot update these configs at default cluster level, broker id must be specified: "
                    f"[{', '.join(broker_only)}]")
        for key, value in configs.items():
            problem = validate_broker_config(key, value)
            if problem is not None:
                return problem
        trial = BrokerProperties(self.properties.static, self.properties.defaults)
        trial.set_dynamic(*self._layers_with(scope, configs))
        try:
            LogConfig.from_properties(trial, {})
        except ValueError as exc:
            return str(exc)
        return None

    def _layers_with(self, scope: str, configs: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        if scope == DEFAULT_SCOPE:
            return configs, self.properties.dynamic_broker
        return self.properties.dynamic_default, configs

    def replace(self, scope: str, configs: dict[str, str]) -> None:
        """Persist ``configs`` as the whole dynamic set at ``scope`` (already checked) and
        apply them to every log whose topic does not override them."""
        before = self.current(scope)
        configs = _dynamic_only(configs)
        self.store.set_broker_configs(scope, configs)
        self.properties.set_dynamic(*self._layers_with(scope, configs))
        changes = [f"{k}={v}" for k, v in sorted(configs.items()) if before.get(k) != v]
        changes += [f"{k} removed" for k in sorted(set(before) - set(configs))]
        if changes:
            log.info("dynamic broker config (%s): %s", _scope_label(scope), ", ".join(changes))
        self.on_change()


def _dynamic_only(configs: dict[str, str]) -> dict[str, str]:
    """The configs Gregor applies: custom ones (names no broker knows) are accepted and dropped."""
    return {k: v for k, v in configs.items() if k in DYNAMIC_BROKER_CONFIGS}
