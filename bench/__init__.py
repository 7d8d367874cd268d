"""`mtpedge bench`: Spec-Bench questions through every decoding method of one bundle, peers side by side,
a graph-width sweep with a roofline estimate, and the report (JSON, Markdown, PNG plots).

    questions.py  the Spec-Bench question file           methods.py   mtpedge drafters as bench methods
    peers/        llama.cpp, transformers, optimum-onnx   runner.py    the interleaved loop over questions
    aggregate.py  per method x category figures           sweep.py     graph-call latency per width
    roofline.py   FLOPs / bytes per call, CPU ceilings    machine.py   what machine the figures come from
    report.py     JSON + Markdown                         plots.py     PNG plots (matplotlib)
"""
