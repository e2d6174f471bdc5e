"""What a pod asks of a node: effective resources and quantities, DRA devices, volumes, and its
capacity class (spot or on-demand) with the providers' presets. Pure functions over pod specs.

May import support only.
"""
