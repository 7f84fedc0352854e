"""Sources: one package per input kind, each turning a producer's own files into records.

Producer packages: ``capture`` (model-call capture stores), ``rollouts`` (collector rows),
``judge`` (judge records in rows), ``pi``, ``openclaw``, ``hermes`` (agent session files). Each
package's ``__init__`` states the format and versions it reads and its entry points.

Shared by them: ``sniff`` (a cheap look at a file's first records), ``detect`` (which reader claims
a file), ``native`` (the contract between session readers and the build, and their registry),
``registry`` (the one line per session reader), ``lineage`` (parent-link cycles), ``manifest``
(the user's map of artifacts to rollouts).
"""
