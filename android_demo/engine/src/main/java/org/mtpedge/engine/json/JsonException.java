package org.mtpedge.engine.json;

/** Malformed JSON, or JSON of the wrong shape for what reads it. */
public class JsonException extends RuntimeException {
    public JsonException(String message) {
        super(message);
    }
}
