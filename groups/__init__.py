"""Where ranks run: the TP groups the local path is called on, and the task code they share.

``simulated`` (threads in one process), ``torch_group`` (``torch.distributed``), ``pool`` and ``rank_process`` (a
persistent gloo rank pool, the driver's side and the rank's, speaking ``wire``), ``torchrun`` (a job under
torchrun), ``tasks`` (what a rank runs for one example), ``devices`` (``--device``) and ``bench`` (the benchmark).
It imports ``sharded`` (the interface in ``sharded.group`` and the implementations it runs) and ``reference``,
never ``engines``, ``properties`` or ``tpargmax``.
"""
