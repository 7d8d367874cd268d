package ai.onnxruntime;
public class OnnxTensor extends OnnxTensorLike {
    public static OnnxTensor createTensor(OrtEnvironment env, java.nio.FloatBuffer data, long[] shape) throws OrtException { return null; }
    public static OnnxTensor createTensor(OrtEnvironment env, java.nio.LongBuffer data, long[] shape) throws OrtException { return null; }
    public java.nio.FloatBuffer getFloatBuffer() { return null; }
    @Override public void close() { }
}
