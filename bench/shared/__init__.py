"""Parts of the benchmark scripts in bench/: ways, setups, probes and report tables, imported by the scripts
(whose folder is first on sys.path), never run themselves."""
