"""dcmlir: DietCode-style tuning of dynamic-shape linalg programs on top of IREE."""

__version__ = "0.1.0"
