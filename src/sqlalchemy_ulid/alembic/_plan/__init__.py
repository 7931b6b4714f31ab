"""The migration engine: an op's plan of steps, run online or written as a script.

``step`` (:class:`~.step.Step`, :class:`~.step.Plan`), ``run`` (the online
runner), ``batches`` (the one batch loop of every online op), ``render_pg``
and ``render_mariadb`` (the offline scripts), ``state`` (the one state table)
and ``database`` (the per-database half, registered by dialect name). The
planners live in ``alembic/postgresql`` and ``alembic/mysql``.
"""
