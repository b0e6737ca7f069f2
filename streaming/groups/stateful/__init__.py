"""The group fold in Spark's state store (``--fold state-store``): the cluster mode of issue 30.

Each offsets-topic partition is one key of ``transformWithStateInPandas`` on the RocksDB provider; its
groups are one map state, a group one pickled value (:mod:`.saved`). A key's call folds its rows with the
driver fold's own :class:`~streaming.groups.stage.GroupStage` (:mod:`.processor`) and hands the driver one
row per changed group (:mod:`.rows`); at start the driver reads every group of the last committed batch
back from the checkpoint (:mod:`.restore`). The state is versioned with the query's checkpoint, so a batch
Spark runs again folds from the state it started from.
"""
