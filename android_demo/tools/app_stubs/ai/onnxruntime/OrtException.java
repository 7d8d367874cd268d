package ai.onnxruntime;
public class OrtException extends Exception { public OrtException(String m) { super(m); } }
