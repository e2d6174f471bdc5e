"""SchedulingPolicy: the model, its validation and CEL compilation, and the sources policies come from."""
