package ai.onnxruntime;
public interface OnnxValue extends AutoCloseable { void close(); }
