"""The provisioner's plugins: discovery, dispatch, and the shipped plugins (docs/plugins.md)."""

from .base import AutomatorPlugin, Plugin, PluginContext, PluginEnv, ProviderPlugin, failed, succeeded
from .descriptor import FieldSpec, PluginDescriptor, PluginError, PluginType, load_descriptor
from .registry import PluginRegistry

__all__ = [
    "AutomatorPlugin",
    "FieldSpec",
    "Plugin",
    "PluginContext",
    "PluginDescriptor",
    "PluginEnv",
    "PluginError",
    "PluginRegistry",
    "PluginType",
    "ProviderPlugin",
    "failed",
    "load_descriptor",
    "succeeded",
]
