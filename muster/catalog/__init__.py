"""The catalog: what may be built (providers, hardware and image types, services, cluster
templates), from files to the log (docs/client.md, "Catalog administration").

- `files.py`: loading — Coopr catalog folders, kind folders, bundles, YAML documents;
  every problem names the file, the entity and the field;
- `templates.py`: `extends` and `includes` resolved into one template (pure);
- `validation.py` (+ `template_checks.py`, `cycles.py`, `sensitive.py`, `problems.py`): the
  whole catalog checked before anything is written (pure);
- `needs.py`: which services of a cluster need which (pure), the rule the planner plans with and
  the read model says what a repair does with;
- `plugins.py`: `PluginSpecs`, the registry of plugin descriptors the catalog is checked
  against; the catalog is *given* one (`services.provisioner.plugins.specs.catalog_plugins`
  builds it from the provisioner's descriptors) and imports no service;
- `store.py`: storage in the log — one `CatalogEntityPut` per entity version, applied all or
  nothing with expected-sequence fencing;
- `cli.py`: `muster catalog validate|apply|diff|get|history`.

The entities themselves are wire models: `contracts/catalog.py`.
"""
