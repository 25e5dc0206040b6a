"""Source understanding: find the tasks in an unlabelled source (target, problem type, time axis, ids).

`stage.understand` is the stage; `evidence` reads the source's words, `columns` and `timeaxis` its data,
`model` asks an LLM when one is configured, `propose` ranks the candidates and `checks` verifies them.
"""
