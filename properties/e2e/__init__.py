"""The end-to-end wing: vLLM's engine running speculative decoding, judged by the suite's oracle.

``probe`` reads what the workers recorded (every call of the draft's head, every proposal, what the target
verified) into the suite's cases; ``checks`` holds the properties and their failures.  Their repro files, which
``tpargmax repro`` replays by starting the engines again, are ``properties.repro.e2e_records``'.
"""
