"""Registers the topology Airflow plugin when this folder is Airflow's plugins_folder.

When the project is installed, its ``airflow.plugins`` entry point registers the same plugin;
Airflow loads the plugins folder first and records a second registration of one name as a plugin
import error, so this file only defines the plugin where the entry point is absent.
(``.airflowignore`` keeps Airflow from importing the package's modules as loose plugin files.)
"""

from importlib.metadata import entry_points

if not any(ep.value == "topology_airflow.plugin:TopologyPlugin" for ep in entry_points(group="airflow.plugins")):
    from topology_airflow.plugin import TopologyPlugin  # noqa: F401
