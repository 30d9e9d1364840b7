"""The objective: J, the edge cut, traffic per hierarchy level and PE loads. CPU and
GPU twins."""
