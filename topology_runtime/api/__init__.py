"""The topology API: what users program against (components, builder, groupings, config, run
status). Standard library only."""
