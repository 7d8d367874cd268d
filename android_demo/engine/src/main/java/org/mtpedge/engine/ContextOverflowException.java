package org.mtpedge.engine;

/** The sequence would outgrow the bundle's context length. */
public class ContextOverflowException extends RuntimeException {
    public ContextOverflowException(String message) {
        super(message);
    }
}
