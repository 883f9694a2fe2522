"""INT8 export, one idea a module (read each top to bottom; none imports this package's __init__):

- options.py: Int8Options, what a caller chooses, with its defaults and validation;
- smoothquant.py: which down_proj MatMuls stay float32, and SmoothQuant (where it folds exactly,
  the smoothing vectors, calibration, the plan);
- integer.py: the integer format (IntegerFormat), per-column weight quantization, default_opset;
- external_data.py: weights one at a time: read, rescale, append page-aligned to a data file;
- quantized_graph.py: the quantized nodes of one MatMul (per-token scales, blocked QuantizeLinear
  or its four-op form, two levels);
- matmul_rewrite.py: quantize_matmuls, the streaming rewrite of a whole graph (opset, weights),
  each MatMul as MatMulRewrite says;
- u8u8.py: write_u8u8_graph, the same integers for CPUs whose u8·s8 kernel saturates;
- drift.py: the drift probe, its comparison and the runtime's load check;
- pipeline.py: quantize_export, from a float32 export to an installed (or refused) INT8 one;
- direct_writer.py: Int8GraphWriter, the graph builder's writer that quantizes each MatMul weight
  as it is read from the source;
- float_reference.py: the float32 probe tables from the builder's graph, a segment of layers at a time;
- direct.py: INT8 straight from the source (the builder's export with the default options): no
  float32 export on disk, never the whole float model in memory.

Variants it does not write (per-tensor activations, float32 channels, the four ops forced) are
studies: export/studies/int8_variants.py.
"""
