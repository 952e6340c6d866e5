"""Device profile data files (one TOML file per board); loaded by edgeopt_agent.profiles."""
