"""The TAN stages, each a function of a Config that calls the engine: the proxy sweep (sweep/), the batch
scaling law and its fit (scaling, fit), the launch, and the pipeline that chains them (`tanplan run`)."""
