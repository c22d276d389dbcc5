"""Building with IREE: one ``iree-compile`` call and its cache, chunked builds of many
variants with failures isolated by bisection, and the lowering routes.
"""
