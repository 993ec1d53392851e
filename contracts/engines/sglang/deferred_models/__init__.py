"""An empty model package: SGLang's registry is started with it as its "external model package", which defers
the import of SGLang's own ~300 model modules (see ``contracts.engines.sglang.registry_cache``)."""
