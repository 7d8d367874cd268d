package ai.onnxruntime;
public class OrtSession implements AutoCloseable {
    public Result run(java.util.Map<String, ? extends OnnxTensorLike> inputs) throws OrtException { return null; }
    public Result run(java.util.Map<String, ? extends OnnxTensorLike> inputs, java.util.Set<String> requestedOutputs)
            throws OrtException { return null; }
    public java.util.Set<String> getOutputNames() throws OrtException { return null; }
    @Override public void close() throws OrtException { }
    public static class SessionOptions implements AutoCloseable {
        public SessionOptions() { }
        public void setIntraOpNumThreads(int numThreads) throws OrtException { }
        public void addConfigEntry(String key, String value) throws OrtException { }
        public void addQnn(java.util.Map<String, String> providerOptions) throws OrtException { }
        @Override public void close() { }
    }
    public static class Result implements AutoCloseable {
        public java.util.Optional<OnnxValue> get(String key) { return java.util.Optional.empty(); }
        @Override public void close() { }
    }
}
