/**
 * Loaded with `--import` into a service process of the bench only: the service without its signing
 * hook (`Signer.install` does nothing), so that the launcher's check-update is measured signed and
 * unsigned in the same run. The service has no setting to turn signing off, and should not have one.
 *
 * Plain JavaScript: the service measured runs from its build, without a TypeScript loader.
 */
import { Signer } from '../dist/modules/signing/signer.js';

Signer.prototype.install = function install() {};
