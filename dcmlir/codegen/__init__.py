"""IR dcmlir generates: kernel modules of a workload, the micro-kernel schedule and the
transform-dialect codegen library.
"""
