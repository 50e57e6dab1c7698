"""Templates of the offline lm-eval task pack (YAML) and the loaders they call; see poptune.evaluate.taskpack."""
